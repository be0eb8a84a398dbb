"""Parsing of human-written sizes and durations.

Sizes follow Kubernetes quantity rules (``512Mi``, ``2G``, ``1e9``) because the same strings travel
from a CachedInferenceService spec into the runtime's flags: one parser on both sides means a size
that the operator accepts is a size the runtime accepts.
"""

from __future__ import annotations

import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_QUANTITY = re.compile(
    r"^\s*(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*$"
)
_DURATION_PART = re.compile(r"(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m|h|d)")
_DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class QuantityError(ValueError):
    """A size or duration string that cannot be read."""


def parse_bytes(value: str | int | float) -> int:
    """Return a byte count for ``value`` (``256Mi``, ``1G``, ``1048576``).

    Accepts Kubernetes binary (Ki, Mi, Gi, ...) and decimal (k, M, G, ...) suffixes and a bare
    ``B`` suffix for plain bytes. Fractions are rounded down: a cache bound never grows by rounding.
    """
    if isinstance(value, bool):
        raise QuantityError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise QuantityError(f"a size cannot be negative: {value!r}")
        return int(value)
    match = _QUANTITY.match(value)
    if match is None:
        raise QuantityError(f"not a size: {value!r} (expected e.g. 512Mi, 2Gi, 1G or 1048576)")
    number, unit = float(match["num"]), match["unit"]
    if unit in ("B", "b"):
        unit = ""
    multiplier = _BINARY.get(unit) or _DECIMAL.get(unit)
    if multiplier is None:
        raise QuantityError(f"unknown size unit {unit!r} in {value!r} (use Ki, Mi, Gi, k, M or G)")
    return int(number * multiplier)


def format_bytes(count: int) -> str:
    """Render a byte count with the largest binary suffix that divides it exactly."""
    for suffix, size in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if count and count % size == 0:
            return f"{count // size}{suffix}"
    return str(count)


def parse_duration_s(value: str | int | float) -> float:
    """Return seconds for ``value``: seconds or a Go duration (``1h30m``, ``90s``)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _parse_go_duration(text)
    if seconds < 0:
        raise QuantityError(f"a duration cannot be negative: {value!r}")
    return seconds


def _parse_go_duration(text: str) -> float:
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match["num"]) * _DURATION_UNITS_S[match["unit"]]
        position = match.end()
    if position != len(text) or not text:
        raise QuantityError(f"not a duration: {text!r} (expected e.g. 3600, 90s, 30m, 1h30m)")
    return total
