"""The inference service: validate, look up the cache, run the model off the event loop.

Layer rule: used by ``http``; uses ``protocol``, ``cache`` and ``models``; knows nothing of HTTP.
"""

from cachefleet.runtime.service.inference import InferenceService, InferOutcome

__all__ = ["InferOutcome", "InferenceService"]
