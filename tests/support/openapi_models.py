"""Walk a manifest against OpenAPI-generated client models (``openapi_types``/``attribute_map``).

The Kubernetes Python client (and KServe's SDK, generated the same way) carries, for every
object type, its fields' JSON names and types. Walking a YAML manifest against them finds a
misspelt or unknown field and a wrongly typed scalar, which a YAML parser never would.

Neither generator keeps the schema's enumerations (no model of either declares allowed values),
so a caller that knows a field's values from elsewhere passes them in ``enums``. Required fields
are checked on request (``required=True``): a fragment of an object leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

#: Scalar type names of the generators, and the Python types a manifest's values may have.
SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (object,),  # IntOrString, RawExtension: anything
    "datetime": (str,),
    "date": (str,),
}

Resolve = Callable[[str], Any]
#: The allowed values of a string field (or of each item of a list of strings), keyed by the
#: model's name and the field's JSON name: ``{("V1beta1ModelSpec", "protocolVersion"): {...}}``.
Enums = Mapping[tuple[str, str], frozenset[str]]


def unknown_fields(
    value: Any,
    type_name: str,
    resolve: Resolve,
    path: str = "",
    *,
    enums: Enums | None = None,
    required: bool = False,
) -> list[str]:
    """Every problem of ``value`` as a ``type_name`` (``V1Container``, ``list[V1EnvVar]``,
    ``dict(str, str)``; newer generators write ``List[...]`` and ``Dict[str, ...]``), each naming
    its path; empty when the manifest fits the models. ``resolve`` turns a model's name into its
    class; a field named in ``enums`` must also hold one of its values, and with ``required`` every
    field a model requires must be there."""
    enums = enums or {}

    def walk(item: Any, item_type: str, item_path: str) -> list[str]:
        return unknown_fields(item, item_type, resolve, item_path, enums=enums, required=required)

    if type_name.startswith(("list[", "List[")):
        if not isinstance(value, list):
            return [f"{path}: a list expected"]
        inner = type_name[len("list[") : -1]
        return [
            problem
            for index, item in enumerate(value)
            for problem in walk(item, inner, f"{path}[{index}]")
        ]
    if type_name.startswith(("dict(", "Dict[")):
        if not isinstance(value, dict):
            return [f"{path}: a map expected"]
        inner = type_name[len("dict(") : -1].split(", ", 1)[1]
        return [
            problem for key, item in value.items() for problem in walk(item, inner, f"{path}.{key}")
        ]
    if type_name in SCALARS:
        wanted = SCALARS[type_name]
        if isinstance(value, bool) and bool not in wanted and object not in wanted:
            return [f"{path}: {type_name} expected, not a boolean"]
        return [] if isinstance(value, wanted) else [f"{path}: {type_name} expected"]
    model = resolve(type_name)
    if not isinstance(value, dict):
        return [f"{path}: a {type_name} object expected"]
    attributes = {json_name: name for name, json_name in model.attribute_map.items()}
    problems: list[str] = []
    if required:
        missing = sorted(required_fields(model) - value.keys())
        problems += [f"{path}.{key}: required by {type_name}, missing" for key in missing]
    for key, item in value.items():
        if key not in attributes:
            problems.append(f"{path}.{key}: not a field of {type_name}")
        else:
            problems += walk(item, model.openapi_types[attributes[key]], f"{path}.{key}")
            if (type_name, key) in enums:
                problems += outside_enum(item, enums[type_name, key], f"{path}.{key}")
    return problems


def required_fields(model: Any) -> set[str]:
    """The JSON names of the fields ``model`` requires. Pydantic models (the Kubernetes client's
    since 37) say so in ``model_fields``; the older generator's models (KServe's SDK) refuse a
    ``None`` in a required field's setter, so each setter is asked, with validation on."""
    if hasattr(model, "model_fields"):
        fields = model.model_fields.items()
        return {model.attribute_map[name] for name, field in fields if field.is_required()}
    probe = model.__new__(model)
    probe.local_vars_configuration = SimpleNamespace(client_side_validation=True)
    required: set[str] = set()
    for name, json_name in model.attribute_map.items():
        try:
            setattr(probe, name, None)
        except ValueError:
            required.add(json_name)
    return required


def outside_enum(value: Any, allowed: frozenset[str], path: str) -> list[str]:
    """A problem for each string of ``value`` (one, or a list of them) not among ``allowed``."""
    items = value if isinstance(value, list) else [value]
    return [
        f"{path}: {item!r} is not one of {sorted(allowed)}"
        for item in items
        if isinstance(item, str) and item not in allowed
    ]
