"""The inference service: validate, look up the cache, run the model off the event loop.

Layer rule: used by ``http`` and ``grpc``; uses ``protocol``, ``cache`` and ``models``; knows
nothing of either transport. Transport-neutral modules: ``inference`` (the one ``answer`` of
every transport, metadata, index, flush), ``memo_answers`` (the answer memo served: one hit and
one memoizing render for both transports), ``request_ledger`` (what every request is counted
in, and the one place it is written), ``request_budget`` (what requests may hold at once),
``statistics`` (Triton's statistics extension), ``model_control`` (load/unload),
``shared_memory`` (system shared-memory regions), ``in_flight``.
"""

from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.inference import (
    DecodeInThread,
    Decoder,
    InferAnswer,
    InferenceService,
    Renderer,
)
from cachefleet.runtime.service.model_control import ModelControl
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry
from cachefleet.runtime.service.statistics import StatisticsRegistry

__all__ = [
    "DecodeInThread",
    "Decoder",
    "InFlight",
    "InferAnswer",
    "InferenceService",
    "ModelControl",
    "Renderer",
    "SharedMemoryRegistry",
    "StatisticsRegistry",
]
