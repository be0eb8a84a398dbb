"""Test helpers around the CRD's openAPIV3Schema: defaulting, JSON Schema, CEL rules.

They do what the API server does with a structural schema, closely enough to catch a rule that
does not compile, a rule that rejects a valid object, and an example the server would refuse.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy.adapter import json_to_cel

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "cachedinferenceservices.cachefleet.io.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def load_crd() -> dict[str, Any]:
    return copy.deepcopy(_crd())


@functools.cache
def _crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD_PATH.read_text()))


@functools.cache
def _program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def schema() -> dict[str, Any]:
    return dict(load_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def apply_defaults(node: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: a missing property with a default gets it, recursively."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    if isinstance(value, list) and "items" in node:
        value = [apply_defaults(node["items"], item) for item in value]
    return value


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 (structural) to JSON Schema; unknown fields are errors (the server prunes)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "default"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


def cel_rules(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (path, rule) in the schema; path segments are property names, [] for items."""
    for rule in node.get("x-kubernetes-validations", []):
        yield path, rule
    for name, sub in node.get("properties", {}).items():
        yield from cel_rules(sub, f"{path}.{name}")
    if "items" in node:
        yield from cel_rules(node["items"], f"{path}[]")


def values_at(value: Any, path: str) -> list[Any]:
    current = [value]
    for part in [p for p in path.replace("[]", ".[]").split(".") if p]:
        nxt: list[Any] = []
        for item in current:
            if part == "[]" and isinstance(item, list):
                nxt.extend(item)
            elif isinstance(item, dict) and part in item:
                nxt.append(item[part])
        current = nxt
    return current


def cel_failures(obj: dict[str, Any]) -> list[str]:
    """Messages of every CEL rule the (defaulted) object breaks; compile errors raise."""
    root = schema()
    defaulted = apply_defaults(root, obj)
    failures = []
    for path, rule in cel_rules(root):
        program = _program(rule["rule"])
        for value in values_at(defaulted, path):
            result = program.evaluate({"self": json_to_cel(value)})
            if isinstance(result, Exception):
                raise result
            if not bool(result):
                failures.append(str(rule.get("message", rule["rule"])))
    return failures
