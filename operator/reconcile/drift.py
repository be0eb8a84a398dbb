"""Whether a live object already carries everything the operator would apply.

The server adds defaults and status, so "equal" is too strict; "every field we set has the value
we set" is the test. Skipping no-op applies keeps watches on children from feeding themselves.
"""

from __future__ import annotations

from typing import Any


def carries(actual: Any, desired: Any) -> bool:
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            key in actual and carries(actual[key], value) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(carries(a, d) for a, d in zip(actual, desired, strict=True))
        )
    if isinstance(desired, bool) or isinstance(actual, bool):
        return bool(actual is desired)
    if isinstance(desired, int | str) and isinstance(actual, int | str):
        return str(actual) == str(desired)  # quantities come back as either
    return bool(actual == desired)
