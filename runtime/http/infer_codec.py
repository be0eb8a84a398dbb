"""HTTP's side of an infer request: its body decoded for the service, the answer rendered.

The service's one ``answer`` takes a decoder and a renderer from each transport; these are
HTTP's (gRPC's are in ``grpc.decode`` and ``grpc.encode``). The body holds JSON and Triton's
binary tensor data; inputs may also come from system shared memory (the decoded request says
so: ``InferRequest.shareable``, which the memo reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import InferRequest, decode_request, encode_response
from cachefleet.runtime.service import InferAnswer, SharedMemoryRegistry
from cachefleet.runtime.service.shared_memory import RequestReads

_JSON = b"application/json"
_BINARY = b"application/octet-stream"
_HEADER_LENGTH = b"inference-header-content-length"


@dataclass(frozen=True, slots=True)
class InferOutcome:
    """A rendered response and how the cache answered it."""

    body: bytes
    #: JSON header length when binary outputs follow the header, else None.
    header_length: int | None
    cache_status: CacheStatus


#: A body with at least this many bytes of JSON is decoded in a worker thread (the service's
#: ``DecodeInThread``); a smaller one on the event loop, where it costs less than the trip to a
#: thread.
THREAD_DECODE_BYTES = 256 * 1024


class BodyDecoder:
    """Decodes one request's body (for the model's config the service resolved), reading any
    shared-memory inputs through one bounded set of reads."""

    __slots__ = ("_body", "_header_length", "_reads", "_shared_memory")

    def __init__(
        self, body: bytes, header_length: int | None, shared_memory: SharedMemoryRegistry
    ) -> None:
        self._body = body
        self._header_length = header_length
        self._shared_memory = shared_memory
        #: This request's reads, bounded in total (made on the first: most requests read none).
        self._reads: RequestReads | None = None

    @property
    def large(self) -> bool:
        """Whether the body holds :data:`THREAD_DECODE_BYTES` of JSON or more."""
        size = len(self._body)
        json_bytes = size if self._header_length is None else min(self._header_length, size)
        return json_bytes >= THREAD_DECODE_BYTES

    def __call__(self, config: ModelConfig) -> InferRequest:
        return decode_request(self._body, self._header_length, config, self)

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """The decoder's view of the shared-memory registry."""
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


def answer_headers(
    body: bytes, header_length: int | None, cache_status: bytes
) -> list[tuple[bytes, bytes]]:
    """An answer's headers: its length and type, how the cache answered, and the binary
    extension's header length when binary outputs follow the JSON header."""
    headers = [(b"content-length", b"%d" % len(body))]
    if header_length is None:
        headers.append((b"content-type", _JSON))
    else:
        headers.append((b"content-type", _BINARY))
        headers.append((_HEADER_LENGTH, b"%d" % header_length))
    headers.append((b"x-cache", cache_status))
    return headers


def header_length_of(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The binary extension's header length that :func:`answer_headers` put in ``headers``."""
    for name, value in headers:
        if name == _HEADER_LENGTH:
            return int(value)
    return None
