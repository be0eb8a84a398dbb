"""A decoded inference request: canonical input tensors plus how the client wants the answer.

Only ``inputs`` (and the parameters that can change the computed tensors) reach the cache key;
everything about rendering (``outputs``, ``binary_output``, ``id``) is applied after the cache,
so that two clients asking the same question differently share one entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cachefleet.runtime.tensor import Tensor

#: Request parameters that only change how the answer is rendered or whether it is cached.
RENDERING_PARAMETERS = frozenset({"binary_data_output", "cache", "priority", "timeout"})


@dataclass(frozen=True, slots=True)
class SharedMemoryRef:
    """A window of a registered shared-memory region (Triton's ``shared_memory_*`` parameters)."""

    region: str
    byte_size: int
    offset: int = 0


class SharedMemoryReader(Protocol):
    """Reads a window of a registered region (the service's shared-memory registry)."""

    def read(self, name: str, offset: int, byte_size: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    """One entry of the request's ``outputs``."""

    name: str
    #: ``parameters.binary_data``; None follows the request's ``binary_data_output``.
    binary: bool | None = None
    #: ``parameters.classification``: top-k classes instead of the raw tensor; 0 is off.
    classification: int = 0
    #: Write the tensor into this shared-memory window instead of the response body.
    shared_memory: SharedMemoryRef | None = None


@dataclass(frozen=True, slots=True)
class InferRequest:
    """A validated request for one model."""

    id: str | None
    inputs: tuple[Tensor, ...]
    #: The requested outputs in request order; empty means every output of the model.
    outputs: tuple[RequestedOutput, ...]
    parameters: Mapping[str, Any]
    #: ``parameters.binary_data_output``: the default encoding of outputs.
    binary_output: bool
    #: Whether an input was read from a shared-memory region (the request's bytes lack it).
    reads_shared_memory: bool = False

    @property
    def shareable(self) -> bool:
        """Whether the request's own bytes and its answer's hold everything the answer depends
        on and gives (no shared memory either way): what a memo of rendered answers may keep."""
        return not self.reads_shared_memory and all(o.shared_memory is None for o in self.outputs)

    @property
    def use_cache(self) -> bool:
        """False when the client sent the request parameter ``"cache": false``."""
        return self.parameters.get("cache") is not False

    def keyed_parameters(self) -> dict[str, Any]:
        """The parameters that may change the computed tensors (candidates for the key)."""
        return {k: v for k, v in self.parameters.items() if k not in RENDERING_PARAMETERS}
