"""The attribute names of a request span: OpenTelemetry's semantic conventions where they have
one (HTTP, RPC, errors), ``cachefleet.*`` for what is ours.

Durations are in seconds (doubles), as the conventions measure durations.
"""

from __future__ import annotations

from typing import Final

# Ours.
MODEL_NAME: Final = "cachefleet.model.name"
MODEL_VERSION: Final = "cachefleet.model.version"
#: How the cache answered, as the X-Cache header says it: hit-local, hit-redis, miss, partial,
#: bypass (the cache not asked).
CACHE_RESULT: Final = "cachefleet.cache.result"
#: The tier that held a hit, by its name (``hit-<tier>``: local, redis; absent for anything
#: but a hit).
CACHE_TIER: Final = "cachefleet.cache.tier"
#: Seconds the request waited for a model instance (or its batch) before its execution started.
QUEUE_DURATION: Final = "cachefleet.queue.duration"
#: Seconds of the model execution that answered the request (inputs joined, run, outputs cut).
COMPUTE_DURATION: Final = "cachefleet.compute.duration"
#: The transport: http or grpc.
TRANSPORT: Final = "cachefleet.transport"

# OpenTelemetry semantic conventions.
HTTP_METHOD: Final = "http.request.method"
HTTP_ROUTE: Final = "http.route"
HTTP_STATUS: Final = "http.response.status_code"
URL_PATH: Final = "url.path"
URL_SCHEME: Final = "url.scheme"
RPC_SYSTEM: Final = "rpc.system"
RPC_SERVICE: Final = "rpc.service"
RPC_METHOD: Final = "rpc.method"
RPC_GRPC_STATUS: Final = "rpc.grpc.status_code"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
URL_FULL: Final = "url.full"

#: What every hit result starts with; the rest is the tier's name.
HIT_PREFIX: Final = "hit-"


def tier_of_result(cache_result: str) -> str | None:
    """The tier named by a hit result (``hit-<tier>``, for any tier); None for the others."""
    if cache_result.startswith(HIT_PREFIX):
        return cache_result[len(HIT_PREFIX) :]
    return None
