"""What the rest of the runtime may know about models: specs, a model, a repository.

The HTTP and service layers depend on these types only, never on ONNX Runtime, so a backend
can change without touching the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cachefleet.runtime.tensor import Tensor


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the model config declares it.

    ``dims`` exclude the batch dimension, as in ``config.pbtxt``; -1 means any size.
    """

    name: str
    datatype: str
    dims: tuple[int, ...]
    label_filename: str | None = None
    #: The shape the model itself takes or gives (config ``reshape``), batch dimension excluded.
    reshape: tuple[int, ...] | None = None
    #: The request may leave this input out (config ``optional: true``).
    optional: bool = False

    def shape(self, max_batch_size: int) -> tuple[int, ...]:
        """The full shape a request sees: a leading -1 batch dimension when batching is on."""
        return (-1, *self.dims) if max_batch_size > 0 else self.dims


@dataclass(frozen=True)
class ModelConfig:
    """The parts of a model's configuration the server acts on, plus the whole document."""

    name: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    response_cache: bool = False
    cache_ttl_s: float | None = None
    #: The configuration as Triton's ``GET /v2/models/{m}/config`` returns it (JSON of ModelConfig).
    document: Mapping[str, Any] = field(default_factory=dict)

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)


class Model(Protocol):
    """One loaded version of a model."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def config(self) -> ModelConfig: ...

    @property
    def labels(self) -> Mapping[str, Sequence[str]]:
        """Classification labels per output name, read from each output's label_filename."""
        ...

    @property
    def fingerprint(self) -> str:
        """BLAKE3 (hex) of the effective config and every file that decides this version's
        answers (``fingerprint``): part of every cache key."""
        ...

    @property
    def quick(self) -> bool:
        """Quick enough to run on the event loop (decided at load, see ``placement``)."""
        ...

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Run the model on validated inputs; returns every output. Blocking: run it in the
        executor unless it is ``quick``."""
        ...


@dataclass(frozen=True)
class ModelIndexEntry:
    """A row of ``POST /v2/repository/index``."""

    name: str
    version: str
    state: str  # READY | UNAVAILABLE
    reason: str = ""


class ModelRepository(Protocol):
    """The loaded model repository."""

    def index(self) -> list[ModelIndexEntry]: ...

    def versions(self, name: str) -> list[str]:
        """Loaded versions of ``name``, ascending; raises ModelNotFoundError if unknown."""
        ...

    def get(self, name: str, version: str | None = None) -> Model:
        """The model at ``version`` (latest loaded if None); raises ModelNotFoundError."""
        ...

    def names(self) -> list[str]:
        """Every model of the repository, loaded or not."""
        ...

    def load(self, name: str, config_json: str | None = None, source: Path | None = None) -> None:
        """(Re)load ``name`` (from ``source``, a staged model folder, when given), blocking;
        raises ModelLoadError with the reason."""
        ...

    def unload(self, name: str) -> None:
        """Stop serving ``name``; raises ModelNotFoundError if unknown."""
        ...

    def close(self) -> None: ...
