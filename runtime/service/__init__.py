"""The inference service: validate, look up the cache, run the model off the event loop.

Layer rule: used by ``http`` and ``grpc``; uses ``protocol``, ``cache`` and ``models``; knows
nothing of either transport. Transport-neutral modules: ``inference`` (the one ``answer`` of
every transport, metadata, index, flush), ``request_ledger`` (what every request is counted
in), ``statistics`` (Triton's statistics extension), ``model_control`` (load/unload),
``shared_memory`` (system shared-memory regions), ``in_flight``.
"""

from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.inference import (
    Decoder,
    InferAnswer,
    InferenceService,
    Renderer,
)
from cachefleet.runtime.service.model_control import ModelControl
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry
from cachefleet.runtime.service.statistics import StatisticsRegistry

__all__ = [
    "Decoder",
    "InFlight",
    "InferAnswer",
    "InferenceService",
    "ModelControl",
    "Renderer",
    "SharedMemoryRegistry",
    "StatisticsRegistry",
]
