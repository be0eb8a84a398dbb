"""One version of an upstream model: a :class:`~cachefleet.runtime.models.types.Model` whose
run is a forwarded ``ModelInfer``.

It runs in the model threads like any model that is not quick (the wait is the network's, and
gRPC releases the GIL while it waits); the composition root sizes those threads by
``--upstream-max-in-flight``. The object stays the same for as long as the version's identity
does: a new object (new fingerprint) is what retires the old answers everywhere that keys or
memoizes by model (``identity``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.models.upstream.client import UpstreamClient
from cachefleet.runtime.tensor import Tensor


@dataclass(eq=False)
class UpstreamModel:
    """A model version the upstream serves."""

    name: str
    version: str
    config: ModelConfig
    fingerprint: str
    client: UpstreamClient = field(repr=False)
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: Never on the event loop: a forwarded run waits on the network.
    quick: bool = False

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Forward ``inputs`` to this very version (not "the latest": the answer must be the
        one its key names). Blocking; raises the upstream's errors as ServingErrors."""
        return self.client.infer(self.name, self.version, inputs)
