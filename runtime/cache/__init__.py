"""The response cache: keys, entries, tiers (local, Redis), coalescing and write-behind.

Layer rule: imports only ``cachefleet.runtime.{tensor,errors,config,metrics}`` and itself;
knows nothing of HTTP or of ONNX Runtime.

- ``api``: the seam the service uses (``ResponseCache``, ``CacheRequest``, ``CacheStatus``).
- ``key`` / ``entry``: pure data, no I/O: the BLAKE3 request key and the checked entry format.
- ``local``: the byte-bounded in-process LRU. ``redis_tier``: Redis, with its errors translated.
- ``breaker``, ``singleflight``, ``writebehind``: the small mechanisms ``read_through`` composes.
- ``completion``: the type that marks a compute as running to completion once started, so
  that ``singleflight`` may lead it in the caller's task.
- ``invalidation``: the pub/sub channel that carries flushes to every replica.
- ``metrics``: the cache's metric children, bound once per model version.
- ``admission``: which tiers each model uses, from measured costs; ``admission_metrics``: its
  decisions in ``/metrics``.
- ``read_through``: the cache itself, over zero to two tiers; ``factory``: settings in, cache out.
"""
