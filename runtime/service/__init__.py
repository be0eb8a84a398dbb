"""The inference service: validate, look up the cache, run the model off the event loop.

Layer rule: used by ``http`` and ``grpc``; uses ``protocol``, ``cache`` and ``models``; knows
nothing of either transport.
"""

from cachefleet.runtime.service.inference import (
    Decoder,
    InferAnswer,
    InferenceService,
    InferOutcome,
    Renderer,
)

__all__ = ["Decoder", "InferAnswer", "InferOutcome", "InferenceService", "Renderer"]
