"""Our ModelConfig schema is Triton's: same field names, numbers, types, oneofs and enums.

The reference is the ``model_config_pb2`` module that ships in the tritonclient wheel (generated
by protoc from Triton's own proto). It is loaded by file path: its package needs grpc to import.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cachefleet.runtime.models.schema import model_config_class


def triton_module() -> ModuleType:
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("tritonclient is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    if not path.is_file():
        pytest.skip("this tritonclient has no model_config_pb2")
    module_spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def differences(ours: Any, theirs: Any, path: str, seen: set[str]) -> list[str]:
    """Every way the message ``ours`` differs from ``theirs``, recursively (descriptors)."""
    if theirs.full_name in seen:
        return []
    seen.add(theirs.full_name)
    found = [f"extra {path}.{f.name}" for f in ours.fields if f.name not in theirs.fields_by_name]
    for field in theirs.fields:
        where = f"{path}.{field.name}"
        mine = ours.fields_by_name.get(field.name)
        if mine is None:
            found.append(f"missing {where}")
            continue
        shape = (field.number, field.type, field.is_repeated)
        if (mine.number, mine.type, mine.is_repeated) != shape:
            found.append(f"{where}: {(mine.number, mine.type, mine.is_repeated)} != {shape}")
        oneofs = [f.containing_oneof.name if f.containing_oneof else None for f in (mine, field)]
        if oneofs[0] != oneofs[1]:
            found.append(f"{where}: oneof {oneofs[0]} != {oneofs[1]}")
        if field.enum_type is not None and mine.enum_type is not None:
            values = [
                [(v.name, v.number) for v in e.values] for e in (mine.enum_type, field.enum_type)
            ]
            if values[0] != values[1]:
                found.append(f"{where}: enum {values[0]} != {values[1]}")
        if field.message_type is not None and mine.message_type is not None:
            found += differences(mine.message_type, field.message_type, where, seen)
    return found


def test_schema_matches_tritons_model_config() -> None:
    theirs = triton_module().ModelConfig.DESCRIPTOR
    assert differences(model_config_class().DESCRIPTOR, theirs, "ModelConfig", set()) == []
