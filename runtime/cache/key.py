"""The cache key: a BLAKE3-256 digest over a canonical, length-prefixed request encoding.

Every field is framed with its length, so no two different requests can encode to the same
byte stream (``FP32[2,2]`` and ``FP32[4]`` with the same bytes differ in their shape field;
Triton's 64-bit hash over names and bytes alone lets them collide). The encoding depends on
nothing process-local, so every replica, before and after a restart, computes the same key.

The model's fingerprint (a BLAKE3 digest of its effective configuration and of every file that
decides its answers, computed at load) is hashed in too: the same name and version over other
files (a rolling update, a reload, another fleet) is another key space, and never shares an
answer. Replicas on the same files compute the same fingerprint, so they still share.

In Redis a key lives under the fleet's namespace (:class:`KeySpace`): one fleet's keys, flushes
and flush messages never touch another's on the same Redis.

Which request parameters are keyed: all of them, except those that only change how a response
is presented or scheduled (:data:`PRESENTATION_PARAMETERS`). Unknown parameters are keyed, so a
new parameter can only split the cache, never serve one request's answer to another.
Per-output parameters (``binary_data``, ``classification``) live on the outputs, not the request,
and never enter the key: a hit is rendered per request from the raw output tensors.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from blake3 import blake3

from cachefleet.runtime.config.settings import DEFAULT_NAMESPACE, NAMESPACE_PATTERN
from cachefleet.runtime.tensor import Tensor

#: Bumped whenever the encoding below changes; it is hashed, so old keys simply stop matching.
#: 2: the model fingerprint is keyed, and Redis keys carry the fleet namespace.
KEY_FORMAT_VERSION = 2
#: The Redis key prefix (contract): ``cachefleet:v2:<namespace>:<model>:<hexdigest>``.
REDIS_PREFIX = "cachefleet:v2"
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
_U64 = struct.Struct("<Q")
_PREFIX = b"cachefleet.key" + struct.pack("<I", KEY_FORMAT_VERSION)
#: Tensor data up to this size is copied into the frame; larger data is hashed in place.
_INLINE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class CacheKey:
    """A request's identity in every tier."""

    model: str
    version: str
    digest: bytes

    def __hash__(self) -> int:
        # The digest alone already tells keys apart, and bytes keep their hash once computed:
        # the tiers, the single-flight and the memo hash a key several times per request.
        return hash(self.digest)

    @property
    def hexdigest(self) -> str:
        return self.digest.hex()


@dataclass(frozen=True, slots=True)
class KeySpace:
    """A fleet's share of a Redis: its keys, the flush pattern of a model, its flush channel.

    The model name stays in the Redis key so that a per-model flush finds its entries; the
    version and the fingerprint are in the digest.
    """

    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        # Settings check it with their message; this guards keys made any other way.
        if NAMESPACE_PATTERN.fullmatch(self.namespace) is None:
            raise ValueError(f"not a cache namespace: {self.namespace!r}")

    @property
    def prefix(self) -> str:
        return f"{REDIS_PREFIX}:{self.namespace}:"

    @property
    def flush_channel(self) -> str:
        """The pub/sub channel of this namespace's flushes (channels are apart from keys)."""
        return f"{REDIS_PREFIX}:{self.namespace}:flush"

    def redis_key(self, key: CacheKey) -> str:
        return f"{REDIS_PREFIX}:{self.namespace}:{key.model}:{key.digest.hex()}"

    def model_pattern(self, model: str) -> str:
        """The ``SCAN MATCH`` pattern of every Redis key of ``model`` (glob characters
        escaped)."""
        escaped = "".join("\\" + char if char in "*?[]\\" else char for char in model)
        return f"{self.prefix}{escaped}:*"

    def holds(self, redis_key: bytes, model: str) -> bool:
        """Whether ``redis_key`` is an entry of exactly ``model`` in this namespace (model
        names may contain colons: model "a" must not take "a:b" with it)."""
        text = redis_key.decode(errors="replace")
        if not text.startswith(self.prefix):
            return False
        named, _, _ = text[len(self.prefix) :].rpartition(":")
        return named == model


def keyed_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The request parameters that enter the key (see the module docstring for the rule)."""
    return {k: v for k, v in parameters.items() if k not in PRESENTATION_PARAMETERS}


def compute_key(
    model: str,
    version: str,
    fingerprint: str,
    inputs: Sequence[Tensor],
    parameters: Mapping[str, Any],
) -> CacheKey:
    """The key of a request to the model version whose files have ``fingerprint``; inputs are
    taken in name order, so their order never matters.

    Small fields are framed into one buffer and large tensor bytes are fed to the hasher as
    they are, so the stream hashed is exactly the documented encoding, without a copy of the
    payload and without one hasher call per field.
    """
    frame = bytearray(_head(model, version, fingerprint, len(inputs)))
    hasher = None
    if len(inputs) < 2:
        ordered = inputs
    elif len(inputs) == 2:  # the common case, without sorted()'s key calls
        first, second = inputs
        ordered = inputs if first.name <= second.name else (second, first)
    else:
        ordered = sorted(inputs, key=_name)
    for tensor in ordered:
        data = tensor.data
        frame += _tensor_frame(tensor.name, tensor.datatype, tensor.shape)
        frame += _U64.pack(len(data))
        if len(data) <= _INLINE_BYTES:
            frame += data
        else:
            if hasher is None:
                hasher = blake3()
            hasher.update(frame)
            hasher.update(data)
            frame.clear()
    frame += _framed_parameters(parameters) if parameters else _NO_PARAMETERS
    if hasher is None:
        return CacheKey(model, version, blake3(frame).digest())
    hasher.update(frame)
    return CacheKey(model, version, hasher.digest())


def _name(tensor: Tensor) -> str:
    return tensor.name


# The framings below repeat for every request of a model; they are cached (bounded: model names,
# versions, input names and datatypes are those of loaded models, checked before any key).
@functools.lru_cache(maxsize=1024)
def _head(model: str, version: str, fingerprint: str, input_count: int) -> bytes:
    """The prefix, the framed model, version and fingerprint, and the number of inputs."""
    named = _framed(model.encode()) + _framed(version.encode()) + _framed(fingerprint.encode())
    return _PREFIX + named + _U64.pack(input_count)


@functools.lru_cache(maxsize=1024)
def _tensor_head(name: str, datatype: str) -> bytes:
    return _framed(name.encode()) + _framed(datatype.encode())


@functools.lru_cache(maxsize=4096)
def _tensor_frame(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """A tensor's framing up to its data length: name, datatype, rank and dimensions (the
    length follows as one more u64). Requests to a model repeat a few of these, so one cached
    lookup replaces their framing; shapes are the client's, so the cache is bounded."""
    rank = len(shape)
    return _tensor_head(name, datatype) + struct.pack(f"<{rank + 1}Q", rank, *shape)


def _framed_parameters(parameters: Mapping[str, Any]) -> bytes:
    return _framed(_parameters(parameters))


def _parameters(parameters: Mapping[str, Any]) -> bytes:
    keyed = keyed_parameters(parameters)
    if not keyed:
        return b"{}"
    return orjson.dumps(keyed, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)


def _framed(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value


#: The framed parameters of a request without any (most requests).
_NO_PARAMETERS = _framed(b"{}")
