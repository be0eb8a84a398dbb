"""``cachefleet bench`` and ``cachefleet demo``: real load generators against real servers.

Everything these commands run is here, the launchers of their peers and the scripts those run
inside the peers' own venvs, and the batching run, included (installing the peers is
``scripts/setup-bench-peer``'s job); runs that no command starts (the chaos run, the operator at
scale, the Kubernetes emulator, the cache micro-benchmark) live in the repository's
``harness/``, and ``results/`` (the record of runs) stays out of the wheel.
"""
