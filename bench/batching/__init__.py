"""Batching run: dynamic batching and the row cache measured under load, side by side.

- Dynamic batching: ``densenet_batch`` and ``simple``, 0% hits, 16 concurrent single-row
  clients, each model with its ``dynamic_batching`` block and without it (same file otherwise).
- Row cache: requests of 8 rows of which a given share repeats rows seen before (0, 50, 90%),
  with the row cache on and with the whole-request cache alone (same model, batching on).

``cachefleet bench --batching`` runs it and writes ``bench/results/batching-<date>.md``.
"""

from cachefleet.bench.batching.command import run_command

__all__ = ["run_command"]
