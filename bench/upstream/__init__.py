"""``cachefleet bench --upstream``: cachefleet in front of real Triton, against Triton alone.

Three figures in one run, each side by side with Triton's own: a hit through cachefleet in
front of Triton against Triton's local-cache hit (wrk over HTTP, perf_analyzer over gRPC), the
miss overhead of the hop against Triton without a cache, and a fleet of replicas sharing one
Redis in front of one Triton against as many Tritons with a local cache each, on a skewed
(Zipf) workload. Modules: :mod:`.plan` (what runs, where it is pinned), :mod:`.servers` (the
processes), :mod:`.fleet` (the Zipf workload and the fleet's counters), :mod:`.report`, and
:mod:`.command` (the run).
"""
