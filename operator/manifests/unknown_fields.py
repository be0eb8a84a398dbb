"""Validation that leaves out the fields a model does not know, and says which they were.

A stored CachedInferenceService may hold fields this operator does not know: the CRD of a newer
release defaults or accepts them, and reaches this operator when the CRD is applied first or
the operator is rolled back. Refusing the whole spec would stall every such service, so those
fields are left out (and named, so the caller can warn) while every known field is validated as
strictly as before: the models keep ``extra="forbid"``, and only the fields their errors name
as extra are removed before validating again.

An unknown field is as often a typo (``mdoe: local``) as a newer release's: each path comes with
the closest field the model knows at that level, when one is close (``difflib``), so the warning
can ask "did you mean".
"""

from __future__ import annotations

import copy
import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)
#: Each pass removes every extra field pydantic reported; a field inside a part that only
#: validates once an outer extra is gone is found by the next pass.
_MAX_PASSES = 8


#: How alike a known field must be to be suggested (difflib's ratio; "mdoe" and "mode": 0.75).
_CUTOFF = 0.7


def validate_known(
    model: type[ModelT],
    data: dict[str, Any],
    *,
    prefix: str = "",
    suggested: dict[str, str] | None = None,
) -> tuple[ModelT, tuple[str, ...]]:
    """``model`` validated from ``data`` without the fields it does not know, and their paths
    (``prefix`` + ``cache.newField``, ``runtime.tolerations[0].newField``), sorted. Into
    ``suggested``, when given: for each such path the path of the known field it is closest to
    (``spec.cache.mdoe``: ``spec.cache.mode``), where one is close.

    Raises pydantic's ``ValidationError`` for anything else wrong, as plain validation does."""
    ignored: list[str] = []
    current = data
    for _ in range(_MAX_PASSES):
        try:
            return model.model_validate(current), tuple(sorted(ignored))
        except ValidationError as error:
            extra = [item["loc"] for item in error.errors() if item["type"] == "extra_forbidden"]
            if not extra:
                raise
            current = copy.deepcopy(current) if current is data else current
            for location in extra:
                if _remove(current, location):
                    ignored.append(prefix + _path(location))
                    near = closest_field(model, location)
                    if near is not None and suggested is not None:
                        suggested[prefix + _path(location)] = prefix + _path([*location[:-1], near])
    return model.model_validate(current), tuple(sorted(ignored))


def _remove(document: Any, location: Sequence[int | str]) -> bool:
    """Delete the field at ``location`` (keys and list indexes); False when it is not there
    (a location inside a union names the member tried, which is not a key of the data)."""
    *parents, last = location
    node = document
    for part in parents:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_dict or in_list):
            return False
        node = node[part]
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    return False


def _path(location: Sequence[int | str]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def closest_field(model: type[BaseModel], location: Sequence[int | str]) -> str | None:
    """The field name (as written: its alias) closest to ``location``'s last part among the
    fields known where it stands, or None when none is close."""
    *parents, unknown = location
    if not isinstance(unknown, str):
        return None
    models = [model]
    for part in parents:
        if isinstance(part, int):
            continue  # an index into a list: the same models
        inner = [m for m in models if m.__name__ == part]  # a union member pydantic tried
        if inner:
            models = inner
            continue
        fields = [f for m in models for n, f in m.model_fields.items() if part in (n, f.alias)]
        models = [found for f in fields for found in _models(f.annotation)]
    names = {f.alias or n for m in models for n, f in m.model_fields.items()}
    by_lower = {name.lower(): name for name in names}
    near = difflib.get_close_matches(unknown.lower(), list(by_lower), n=1, cutoff=_CUTOFF)
    return by_lower[near[0]] if near else None


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds: itself, or inside Optional, unions, lists and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _models(args[0])
    if origin in (Union, types.UnionType, list, tuple, dict, set, frozenset) or (
        isinstance(origin, type) and args
    ):
        return [m for arg in args for m in _models(arg)]
    return []
