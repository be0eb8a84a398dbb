"""The cache key: a BLAKE3-256 digest over a canonical, length-prefixed request encoding.

Every field is framed with its length, so no two different requests can encode to the same
byte stream (``FP32[2,2]`` and ``FP32[4]`` with the same bytes differ in their shape field;
Triton's 64-bit hash over names and bytes alone lets them collide). The encoding depends on
nothing process-local, so every replica, before and after a restart, computes the same key.

Which request parameters are keyed: all of them, except those that only change how a response
is presented or scheduled (:data:`PRESENTATION_PARAMETERS`). Unknown parameters are keyed, so a
new parameter can only split the cache, never serve one request's answer to another.
Per-output parameters (``binary_data``, ``classification``) live on the outputs, not the request,
and never enter the key: a hit is rendered per request from the raw output tensors.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from blake3 import blake3

from cachefleet.runtime.tensor import Tensor

#: Bumped whenever the encoding below changes; it is hashed, so old keys simply stop matching.
KEY_FORMAT_VERSION = 1
#: The Redis key prefix (contract): ``cachefleet:v1:<model>:<version>:<hexdigest>``.
REDIS_PREFIX = "cachefleet:v1"
#: Request parameters that cannot change the computed tensors.
PRESENTATION_PARAMETERS: frozenset[str] = frozenset(
    {
        "binary_data_output",  # JSON vs binary rendering of the outputs
        "cache",  # the per-request cache opt-out itself
        "headers",  # Triton: HTTP headers forwarded as parameters
        "priority",  # scheduling only
        "timeout",  # scheduling only
    }
)
_DOMAIN = b"cachefleet.key"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class CacheKey:
    """A request's identity in every tier."""

    model: str
    version: str
    digest: bytes

    @property
    def hexdigest(self) -> str:
        return self.digest.hex()

    @property
    def redis_key(self) -> str:
        return f"{REDIS_PREFIX}:{self.model}:{self.version}:{self.hexdigest}"


def redis_model_pattern(model: str) -> str:
    """The ``SCAN MATCH`` pattern of every Redis key of ``model`` (glob characters escaped)."""
    escaped = "".join("\\" + char if char in "*?[]\\" else char for char in model)
    return f"{REDIS_PREFIX}:{escaped}:*"


def keyed_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The request parameters that enter the key (see the module docstring for the rule)."""
    return {k: v for k, v in parameters.items() if k not in PRESENTATION_PARAMETERS}


def compute_key(
    model: str, version: str, inputs: Sequence[Tensor], parameters: Mapping[str, Any]
) -> CacheKey:
    """The key of a request; inputs are taken in name order, so their order never matters."""
    hasher = blake3()
    hasher.update(_DOMAIN)
    hasher.update(_U32.pack(KEY_FORMAT_VERSION))
    _field(hasher, model.encode())
    _field(hasher, version.encode())
    hasher.update(_U64.pack(len(inputs)))
    for tensor in sorted(inputs, key=lambda t: t.name):
        _field(hasher, tensor.name.encode())
        _field(hasher, tensor.datatype.encode())
        hasher.update(_U64.pack(len(tensor.shape)))
        for dim in tensor.shape:
            hasher.update(_U64.pack(dim))
        _field(hasher, tensor.data)
    params = orjson.dumps(
        keyed_parameters(parameters),
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        default=str,
    )
    _field(hasher, params)
    return CacheKey(model, version, hasher.digest())


def _field(hasher: Any, value: bytes) -> None:
    hasher.update(_U64.pack(len(value)))
    hasher.update(value)
