"""Chaos run: load from several client processes on two servers sharing one Redis, with faults.

While client processes send ``simple`` requests (a small pool of repeated inputs, unique inputs,
pairs sent to one server then the other so the second answers from Redis, and inputs whose Redis
keys hold planted entries) to every server, the conductor kills Redis and restarts it on the same
port, pauses it past the socket timeout (``CLIENT PAUSE``), fills it (``maxmemory`` at its current
use with ``noeviction``), and keeps planting corrupt and foreign entries (valid entries of another
input, model or version) at the keys the clients are about to ask for. Every answer is checked
against numpy's: a cache may be slow or cold, never wrong.

The same ``run.run_chaos`` (and ``run.run_cluster_chaos``, its Redis Cluster variant) drives
the reliability tests (short) and ``bash scripts/harness chaos`` (``__main__``: longer, with a
Markdown report in ``bench/results/chaos-<date>.md``). Modules: ``answers`` (requests and the
answers numpy says they must get; the end-to-end tests use it too), ``clients`` (the load
processes), ``faults`` and ``cluster_faults`` (the conductor), ``planted`` (corrupt and foreign
entries), ``control`` (what they share), ``run``, ``report``.
"""
