"""``cachefleet bench`` and ``cachefleet demo``: real load generators against real servers.

Everything these commands run is here, their peers and their chaos and batching runs included;
runs that no command starts (the operator at scale, the Kubernetes emulator, the cache
micro-benchmark) live in the repository's ``harness/``, and ``results/`` (the record of runs)
stays out of the wheel.
"""
