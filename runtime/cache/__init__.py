"""The response cache: keys, entries, tiers (memo, local, Redis), coalescing and write-behind.

Layer rule: imports only ``cachefleet.runtime.{tensor,errors,config,metrics}`` and itself;
knows nothing of HTTP or of ONNX Runtime.

- ``api``: the seam the service uses (``ResponseCache``, ``CacheRequest``, ``CacheStatus``).
- ``tier``: what every tier is (``Tier``: lookup, insert, delete, flush, figures; its ``name``
  and whether it is ``shared`` are data, not other interfaces).
- The tiers: ``local`` (the byte-bounded in-process LRU of output tensors), ``shared_tier`` (a
  shared store as a tier: entries sealed and checked, breakers, write-behind) over a ``store``
  (get, get many, set soon, delete soon, flush a model, publish), of which ``redis_tier`` is
  one (the commands, with ``batch`` and ``pipelined``; the client from ``redis_clients`` and
  ``redis_endpoint``). In front of them, ``memo`` (rendered answers by raw request bytes,
  which the transports consult), flushed and reported with them.
- ``key`` / ``entry``: pure data, no I/O: the BLAKE3 request key and the checked entry format.
- What composes around the tiers: ``admission`` (which tiers each model uses, from measured
  costs; ``admission_metrics``: its decisions in ``/metrics``), ``singleflight``, ``fleet``
  (with ``fleet_lease``, ``fleet_fills``, ``fleet_policy``, ``fleet_setup``: one computation per
  fleet), ``writebehind``, ``breaker`` / ``breakers``, ``flush_marks``, ``invalidation`` (the
  pub/sub channel that carries flushes to every replica, on ``channel_listener``).
- ``completion``: the type that marks a compute as running to completion once started, so
  that ``singleflight`` may lead it in the caller's task.
- ``metrics``: the cache's per-model metric children, bound once per model version;
  ``tier_metrics``: every tier's figures in ``/metrics``.
- ``read_through``: the cache itself; ``row_path``: a batched request row by row; both take
  the one walk over the tiers (``walk``) with a request's decisions made once (``plan``).
  ``factory``: settings in, cache out, and the one place the tiers are listed (as data:
  ``TIER_KINDS``).
"""
