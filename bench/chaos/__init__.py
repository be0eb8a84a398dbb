"""Chaos run: load from several client processes on two servers sharing one Redis, with faults.

While client processes send ``simple`` requests (a small pool of repeated inputs, unique inputs,
pairs sent to one server then the other so the second answers from Redis, and inputs whose Redis
keys hold planted entries) to every server, the conductor kills Redis and restarts it on the same
port, pauses it past the socket timeout (``CLIENT PAUSE``), fills it (``maxmemory`` at its current
use with ``noeviction``), and keeps planting corrupt and foreign entries (valid entries of another
input, model or version) at the keys the clients are about to ask for. Every answer is checked
against numpy's: a cache may be slow or cold, never wrong.

The same :func:`run_chaos` drives the reliability test (short) and ``cachefleet bench --chaos``
(longer, with a Markdown report in ``bench/results/chaos-<date>.md``). :func:`run_cluster_chaos`
is the Redis Cluster variant (``--chaos --redis-mode cluster``): three primaries with a replica
each, one shard struck at a time (killed and restarted, failed over by hand, paused, filled).
"""

from cachefleet.bench.chaos.answers import (
    MODEL,
    PLANTED_BASE,
    PLANTED_COUNT,
    POOL_SIZE,
    answer_is_right,
    decode_outputs,
    expected_outputs,
    input_tensors,
    inputs_for,
    redis_key,
    request_body,
)
from cachefleet.bench.chaos.clients import SLOW_S, ClientResult
from cachefleet.bench.chaos.command import run_command
from cachefleet.bench.chaos.control import STEADY, ChaosOptions, Log, RedisControl
from cachefleet.bench.chaos.faults import FaultLog
from cachefleet.bench.chaos.report import ChaosReport, render_table
from cachefleet.bench.chaos.run import run_chaos, run_cluster_chaos

__all__ = [
    "MODEL",
    "PLANTED_BASE",
    "PLANTED_COUNT",
    "POOL_SIZE",
    "SLOW_S",
    "STEADY",
    "ChaosOptions",
    "ChaosReport",
    "ClientResult",
    "FaultLog",
    "Log",
    "RedisControl",
    "answer_is_right",
    "decode_outputs",
    "expected_outputs",
    "input_tensors",
    "inputs_for",
    "redis_key",
    "render_table",
    "request_body",
    "run_chaos",
    "run_cluster_chaos",
    "run_command",
]
