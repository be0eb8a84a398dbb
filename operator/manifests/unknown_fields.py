"""Validation that leaves out the fields a model does not know, and says which they were.

A stored CachedInferenceService may hold fields this operator does not know: the CRD of a newer
release defaults or accepts them, and reaches this operator when the CRD is applied first or
the operator is rolled back. Refusing the whole spec would stall every such service, so those
fields are left out (and named, so the caller can warn) while every known field is validated as
strictly as before: the models keep ``extra="forbid"``, and only the fields their errors name
as extra are removed before validating again.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)
#: Each pass removes every extra field pydantic reported; a field inside a part that only
#: validates once an outer extra is gone is found by the next pass.
_MAX_PASSES = 8


def validate_known(
    model: type[ModelT], data: dict[str, Any], *, prefix: str = ""
) -> tuple[ModelT, tuple[str, ...]]:
    """``model`` validated from ``data`` without the fields it does not know, and their paths
    (``prefix`` + ``cache.newField``, ``runtime.tolerations[0].newField``), sorted.

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
