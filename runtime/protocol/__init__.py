"""The KServe v2 protocol: JSON and binary-extension bodies to and from Tensors.

Layer rule: pure functions over bytes and Tensors; may use ``models.types`` to validate requests.
"""

from cachefleet.runtime.protocol.cache_control import directives_from
from cachefleet.runtime.protocol.decode import decode_request
from cachefleet.runtime.protocol.metadata import model_metadata, repository_index, server_metadata
from cachefleet.runtime.protocol.outputs import select_outputs
from cachefleet.runtime.protocol.request import (
    InferRequest,
    RequestedOutput,
    SharedMemoryReader,
    SharedMemoryRef,
)
from cachefleet.runtime.protocol.response import EncodedResponse, encode_response

__all__ = [
    "EncodedResponse",
    "InferRequest",
    "RequestedOutput",
    "SharedMemoryReader",
    "SharedMemoryRef",
    "decode_request",
    "directives_from",
    "encode_response",
    "model_metadata",
    "repository_index",
    "select_outputs",
    "server_metadata",
]
