"""HTTP's side of an infer request: its body decoded for the service, the answer rendered.

The service's one ``answer`` takes a decoder and a renderer from each transport; these are
HTTP's (gRPC's are in ``grpc.decode`` and ``grpc.encode``). The body holds JSON and Triton's
binary tensor data; inputs may also come from system shared memory, which a request that
reads it cannot be answered from a memo of rendered responses (its body does not hold them).
"""

from __future__ import annotations

from dataclasses import dataclass

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import InferRequest, decode_request, encode_response
from cachefleet.runtime.service import InferAnswer, SharedMemoryRegistry
from cachefleet.runtime.service.shared_memory import RequestReads


@dataclass(frozen=True, slots=True)
class InferOutcome:
    """A rendered response and how the cache answered it."""

    body: bytes
    #: JSON header length when binary outputs follow the header, else None.
    header_length: int | None
    cache_status: CacheStatus


class BodyDecoder:
    """Decodes one request's body, noting whether it read shared memory."""

    def __init__(
        self, body: bytes, header_length: int | None, shared_memory: SharedMemoryRegistry
    ) -> None:
        self._body = body
        self._header_length = header_length
        self._shared_memory = shared_memory
        #: This request's reads, bounded in total (made on the first: most requests read none).
        self._reads: RequestReads | None = None
        #: Whether an input came from a shared-memory region.
        self.read_shared_memory = False

    def __call__(self, config: ModelConfig) -> InferRequest:
        return decode_request(self._body, self._header_length, config, self)

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """The decoder's view of the shared-memory registry."""
        self.read_shared_memory = True
        if self._reads is None:
            self._reads = self._shared_memory.for_request()
        return self._reads.read(name, offset, byte_size)


def render(answer: InferAnswer) -> InferOutcome:
    """The answer as an HTTP body: JSON, with binary outputs after it where asked."""
    model = answer.model
    encoded = encode_response(
        answer.request,
        answer.outputs,
        model_name=model.name,
        model_version=model.version,
        labels=model.labels,
        batched=model.config.max_batch_size > 0,
    )
    return InferOutcome(encoded.body, encoded.header_length, answer.cache_status)
