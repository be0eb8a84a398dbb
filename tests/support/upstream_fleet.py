"""A burst over a fleet in front of one upstream, and what the upstream says it executed.

The burst is released while the upstream is paused (SIGSTOP on its process), and the upstream
goes on once every request of the burst is in flight at its replica (their
``cachefleet_queue_pending``): the burst of new keys a fleet meets when its upstream is slow to
answer, without depending on how fast the machine is. A replica that has not yet measured the
model's compute time waits for the fleet's lease holder up to ``--cache-fleet-max-wait``
(``cache.fleet_policy``): give the replicas one that outlasts the burst on a loaded machine, and
an ``--upstream-timeout`` and ``--upstream-control-timeout`` as long, so that neither the
forwarded calls nor the refreshes give up on the paused upstream.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import tritonclient.http as httpclient

from support import loopback
from support.processes import ServerProcess
from support.sample_requests import infer
from support.waiting import wait_for

#: What the burst got for one request: its seed, the answer's body and its X-Cache.
Answer = tuple[int, bytes, str]


def executed(address: str, model: str) -> tuple[int, int, int]:
    """``model``'s execution_count, inference_count and successful requests at the server at
    ``address`` (``host:port``, HTTP), as its statistics extension counts them (all versions)."""
    stats = httpclient.InferenceServerClient(address).get_inference_statistics(model)
    counts = [0, 0, 0]
    for version in stats["model_stats"]:
        counts[0] += int(version["execution_count"])
        counts[1] += int(version["inference_count"])
        counts[2] += int(version["inference_stats"]["success"]["count"])
    return counts[0], counts[1], counts[2]


def pending(replicas: Sequence[ServerProcess], model: str) -> int:
    """Requests for ``model`` the replicas have accepted and not answered yet."""
    series = re.compile(rf'^cachefleet_queue_pending\{{model="{model}".*\}} (\S+)$', re.MULTILINE)
    total = 0.0
    for replica in replicas:
        text = loopback.get(f"{replica.base_url}/metrics", timeout=30).text
        total += sum(float(found.group(1)) for found in series.finditer(text))
    return int(total)


def leases(replicas: Sequence[ServerProcess], model: str) -> int:
    """Fleet leases taken for ``model`` by the replicas (one per computation the fleet ran)."""
    series = re.compile(
        rf'^cachefleet_cache_fleet_leases_total\{{model="{model}".*\}} (\S+)$', re.MULTILINE
    )
    text = "".join(loopback.get(f"{r.base_url}/metrics", timeout=30).text for r in replicas)
    return int(sum(float(found.group(1)) for found in series.finditer(text)))


def burst_while_paused(
    upstream_pid: int,
    replicas: Sequence[ServerProcess],
    model: str,
    seeds: Sequence[int],
    per_replica: int,
) -> list[Answer]:
    """Each seed's request (``sample_requests.infer``) ``per_replica`` times to every replica,
    all released at once while the upstream is paused; every answer."""
    sends = [(replica, seed) for replica in replicas for seed in seeds for _ in range(per_replica)]
    gate = threading.Barrier(len(sends) + 1)

    def one(replica: ServerProcess, seed: int) -> Answer:
        gate.wait()
        response, _ = infer(replica, model, seed)
        return seed, response.content, response.headers["X-Cache"]

    os.kill(upstream_pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(len(sends)) as pool:
            answers = [pool.submit(one, replica, seed) for replica, seed in sends]
            gate.wait()
            wait_for(lambda: pending(replicas, model) == len(sends), "the burst in flight", 120)
            os.kill(upstream_pid, signal.SIGCONT)
            return [answer.result(timeout=300) for answer in answers]
    finally:
        os.kill(upstream_pid, signal.SIGCONT)
