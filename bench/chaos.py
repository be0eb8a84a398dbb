"""Chaos run: load from several client processes on two servers sharing one Redis, with faults.

While client processes send ``simple`` requests (a small pool of repeated inputs, unique inputs,
pairs sent to one server then the other so the second answers from Redis, and inputs whose Redis
keys hold planted entries) to every server, the conductor kills Redis and restarts it on the same
port, pauses it past the socket timeout (``CLIENT PAUSE``), fills it (``maxmemory`` at its current
use with ``noeviction``), and keeps planting corrupt and foreign entries (valid entries of another
input, model or version) at the keys the clients are about to ask for. Every answer is checked
against numpy's: a cache may be slow or cold, never wrong.

The same :func:`run_chaos` drives the reliability test (short) and ``cachefleet bench --chaos``
(longer, with a Markdown report in ``bench/results/chaos-<date>.md``).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import http.client
import multiprocessing
import os
import queue
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from cachefleet.runtime.cache.entry import encode_entry
from cachefleet.runtime.cache.key import compute_key
from cachefleet.runtime.tensor import Tensor

MODEL = "simple"
POOL_SIZE = 24
PLANTED_BASE = 1_000_000_000
PLANTED_COUNT = 4000
_UNIQUE_STRIDE = 10_000_000
SLOW_S = 0.02
STEADY = "steady"
Log = Callable[[str], None]


class RedisControl(Protocol):
    """A redis-server the conductor may kill and start again on the same port."""

    port: int

    def kill(self) -> None: ...

    def start(self) -> None: ...


@dataclass(frozen=True)
class ChaosOptions:
    """How long and how hard; the fault schedule repeats every ``cycle_s`` seconds."""

    duration_s: float = 20.0
    clients: int = 3
    cycle_s: float = 20.0
    pause_ms: int = 1500
    request_timeout_s: float = 20.0


# -- the model's answer, computed without any server ------------------------------------------


def inputs_for(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The two INT32 inputs of request ``seed`` (batch 1 or 2, the full int32 range)."""
    rng = np.random.default_rng(seed)
    batch = 1 + seed % 2
    low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    first = rng.integers(low, high, (batch, 16), dtype=np.int32, endpoint=True)
    second = rng.integers(low, high, (batch, 16), dtype=np.int32, endpoint=True)
    return first, second


def expected_outputs(seed: int) -> dict[str, np.ndarray]:
    """What ``simple`` computes: the sum and the difference, wrapping like int32 does."""
    first, second = inputs_for(seed)
    with np.errstate(over="ignore"):
        return {"OUTPUT0": first + second, "OUTPUT1": first - second}


def input_tensors(seed: int) -> list[Tensor]:
    first, second = inputs_for(seed)
    return [Tensor.from_numpy("INPUT0", first), Tensor.from_numpy("INPUT1", second)]


def redis_key(seed: int) -> str:
    """The Redis key the servers use for request ``seed`` (no keyed parameters are sent)."""
    return compute_key(MODEL, "1", input_tensors(seed), {}).redis_key


# -- requests as a client sends them -----------------------------------------------------------


def request_body(seed: int, binary: bool) -> tuple[bytes, dict[str, str]]:
    """Request ``seed`` in Triton's binary tensor extension, or as plain JSON."""
    first, second = inputs_for(seed)
    if not binary:
        document = {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": list(a.shape), "data": a.ravel().tolist()}
                for n, a in (("INPUT0", first), ("INPUT1", second))
            ]
        }
        return orjson.dumps(document), {"Content-Type": "application/json"}
    header = orjson.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": list(a.shape),
                 "parameters": {"binary_data_size": a.nbytes}}
                for n, a in (("INPUT0", first), ("INPUT1", second))
            ],
            "parameters": {"binary_data_output": True},
        }
    )  # fmt: skip
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + first.tobytes() + second.tobytes(), headers


def decode_outputs(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """The outputs of a response (JSON ``data`` or binary), as int32 arrays by name."""
    size = int(header_length) if header_length is not None else len(body)
    document = orjson.loads(body[:size])
    outputs: dict[str, np.ndarray] = {}
    offset = size
    for item in document["outputs"]:
        if item.get("datatype") != "INT32":
            raise ValueError(f"output {item.get('name')!r} has datatype {item.get('datatype')!r}")
        binary_size = item.get("parameters", {}).get("binary_data_size")
        if binary_size is None:
            array = np.asarray(item["data"], dtype=np.int32)
        else:
            array = np.frombuffer(body[offset : offset + binary_size], dtype="<i4")
            offset += binary_size
        outputs[item["name"]] = array.reshape(item["shape"])
    return outputs


def answer_is_right(seed: int, outputs: dict[str, np.ndarray]) -> bool:
    want = expected_outputs(seed)
    return outputs.keys() == want.keys() and all(
        outputs[name].shape == want[name].shape and np.array_equal(outputs[name], want[name])
        for name in want
    )


# -- client processes --------------------------------------------------------------------------


@dataclass
class ClientResult:
    """What one client process saw. ``hit_redis_at`` are wall-clock times of hit-redis answers."""

    sent: int = 0
    failed: int = 0
    wrong: int = 0
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    hit_redis_at: list[float] = field(default_factory=list)
    #: (wall-clock start, seconds) of requests slower than :data:`SLOW_S`, to place stalls.
    slow: list[tuple[float, float]] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


class _Client:
    """One process's loop: keep-alive connections to every server, every answer checked."""

    def __init__(self, index: int, urls: list[str], timeout_s: float) -> None:
        self.rng = random.Random(index)
        self.addresses = [url.removeprefix("http://").rsplit(":", 1) for url in urls]
        self.connections: list[http.client.HTTPConnection | None] = [None] * len(urls)
        self.timeout_s = timeout_s
        self.unique = (index + 1) * _UNIQUE_STRIDE
        self.result = ClientResult()

    def run_until(self, stop_at: float) -> ClientResult:
        while time.time() < stop_at:
            roll = self.rng.random()
            server = self.rng.randrange(len(self.connections))
            if roll < 0.45:
                self.send(server, self.rng.randrange(POOL_SIZE))
            elif roll < 0.65:
                self.send(server, self._next_unique())
            elif roll < 0.85:  # the second server should find the first one's answer in Redis
                seed = self._next_unique()
                self.send(server, seed)
                self.send((server + 1) % len(self.connections), seed)
            else:
                self.send(server, PLANTED_BASE + self.rng.randrange(PLANTED_COUNT))
        for connection in self.connections:
            if connection is not None:
                connection.close()
        return self.result

    def _next_unique(self) -> int:
        self.unique += 1
        return self.unique

    def send(self, server: int, seed: int) -> None:
        body, headers = request_body(seed, binary=self.rng.random() < 0.5)
        result = self.result
        result.sent += 1
        started, wall = time.perf_counter(), time.time()
        try:
            status, reply, reply_headers = self._post(server, body, headers)
        except (OSError, http.client.HTTPException) as error:
            self._drop(server)
            result.failed += 1
            self._example(f"seed {seed}: {type(error).__name__}: {error}")
            return
        finally:
            elapsed = time.perf_counter() - started
            result.latencies_s.append(elapsed)
            if elapsed >= SLOW_S:
                result.slow.append((wall, elapsed))
        if status != 200:
            result.failed += 1
            self._example(f"seed {seed}: HTTP {status}: {reply[:200]!r}")
            return
        cache = reply_headers.get("x-cache", "?")
        result.statuses[cache] = result.statuses.get(cache, 0) + 1
        if cache == "hit-redis":
            result.hit_redis_at.append(time.time())
        try:
            right = answer_is_right(
                seed, decode_outputs(reply, reply_headers.get("inference-header-content-length"))
            )
        except (ValueError, KeyError, TypeError) as error:
            right = False
            self._example(f"seed {seed}: undecodable answer ({error})")
        if not right:
            result.wrong += 1
            self._example(f"seed {seed}: wrong answer, X-Cache {cache}")

    def _post(
        self, server: int, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        connection = self.connections[server]
        if connection is None:
            host, port = self.addresses[server]
            connection = http.client.HTTPConnection(host, int(port), timeout=self.timeout_s)
            self.connections[server] = connection
        connection.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers=headers)
        response = connection.getresponse()
        reply = response.read()
        return response.status, reply, {k.lower(): v for k, v in response.getheaders()}

    def _drop(self, server: int) -> None:
        connection, self.connections[server] = self.connections[server], None
        if connection is not None:
            connection.close()

    def _example(self, text: str) -> None:
        if len(self.result.examples) < 5:
            self.result.examples.append(text)


def _client_main(
    index: int, urls: list[str], stop_at: float, timeout_s: float, results: Any
) -> None:
    """Entry point of a client process (spawned, so it shares nothing with the conductor)."""
    results.put((index, _Client(index, urls, timeout_s).run_until(stop_at)))


# -- the conductor: faults on a schedule, entries planted all along ----------------------------


@dataclass
class FaultLog:
    """Wall-clock times of what the conductor did; ``back_at`` is when a restart answered."""

    #: (wall-clock time, phase that starts then, what was done)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    back_at: list[float] = field(default_factory=list)
    planted: int = 0

    def note(self, phase: str, what: str, at: float | None = None) -> None:
        self.events.append((time.time() if at is None else at, phase, what))

    def phase_at(self, moment: float) -> str:
        """The phase in force at ``moment`` (``steady`` before the first fault)."""
        events = sorted(self.events)
        index = bisect.bisect_right([t for t, _, _ in events], moment)
        return events[index - 1][1] if index else STEADY


class _Conductor:
    """Runs the fault schedule against ``redis`` and plants entries from a second thread."""

    def __init__(self, redis: RedisControl, options: ChaosOptions, log: Log) -> None:
        self.redis = redis
        self.options = options
        self.log = log
        self.faults = FaultLog()
        self.stop = threading.Event()
        self.rng = random.Random(7)
        self.foreign = _foreign_entries()

    def _client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=5)

    def schedule(self, stop_at: float) -> None:
        """One cycle: kill at 15%, restart at 25%, pause at 45%, fill at 60%, unfill at 75%."""
        cycle = self.options.cycle_s
        steps: list[tuple[float, Callable[[], None]]] = [
            (0.15, self._kill), (0.25, self._restart), (0.45, self._pause),
            (0.60, self._fill), (0.75, self._unfill),
        ]  # fmt: skip
        start = time.time()
        index = 0
        while True:
            at_cycle, action = steps[index % len(steps)]
            when = start + (index // len(steps)) * cycle + at_cycle * cycle
            if when >= stop_at - 0.5:
                break
            self.stop.wait(max(0.0, when - time.time()))
            action()
            index += 1

    def _kill(self) -> None:
        self.redis.kill()
        self.faults.note("redis down", "killed with SIGKILL")
        self.log("chaos: redis killed")

    def _restart(self) -> None:
        self.redis.start()
        self.faults.back_at.append(time.time())
        self.faults.note("after restart", "started again on the same port")
        self.log("chaos: redis restarted")

    def _pause(self) -> None:
        self._client().execute_command("CLIENT", "PAUSE", str(self.options.pause_ms), "ALL")
        self.faults.note("redis paused", f"CLIENT PAUSE {self.options.pause_ms} ALL")
        self.faults.note(STEADY, "pause over", time.time() + self.options.pause_ms / 1000)
        self.log("chaos: redis paused")

    def _fill(self) -> None:
        client = self._client()
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(used))
        self.faults.note("redis full", "maxmemory at its use, noeviction")
        self.log("chaos: redis full")

    def _unfill(self) -> None:
        self._client().config_set("maxmemory", "0")
        self.faults.note(STEADY, "maxmemory lifted")
        self.log("chaos: redis has room again")

    def plant_forever(self) -> None:
        """Every 100 ms, overwrite 50 planted keys with garbage or another request's entry."""
        client = None
        while not self.stop.wait(0.1):
            try:
                client = client or self._client()
                pipe = client.pipeline(transaction=False)
                for _ in range(50):
                    seed = PLANTED_BASE + self.rng.randrange(PLANTED_COUNT)
                    pipe.set(redis_key(seed), self._bad_value(client))
                pipe.execute()
                self.faults.planted += 50
            except Exception:  # Redis killed, paused or full: plant again later
                client = None

    def _bad_value(self, client: Any) -> bytes:
        kind = self.rng.randrange(4)
        if kind == 0:  # a real entry of a pool request, copied as is
            value = client.get(redis_key(self.rng.randrange(POOL_SIZE)))
            if value:
                return bytes(value)
        if kind == 1:  # garbage
            return self.rng.randbytes(self.rng.randrange(1, 300))
        if kind == 2:  # a real-looking entry with one bit flipped, or cut short
            entry = bytearray(self.rng.choice(self.foreign))
            if self.rng.random() < 0.5:
                return bytes(entry[: self.rng.randrange(len(entry))])
            entry[self.rng.randrange(len(entry))] ^= 1 << self.rng.randrange(8)
            return bytes(entry)
        return self.rng.choice(self.foreign)


def _foreign_entries() -> list[bytes]:
    """Valid entries written for another input, another version, and another model.

    Each holds the outputs of another request, so serving one would be a wrong answer.
    """
    inputs, outputs = input_tensors(5), expected_outputs(6)
    tensors = [Tensor.from_numpy(name, array) for name, array in outputs.items()]
    strings = [Tensor("INPUT0", "BYTES", t.shape, t.data) for t in inputs]
    digests = [
        compute_key(MODEL, "1", input_tensors(6), {}).digest,  # another input
        compute_key(MODEL, "2", inputs, {}).digest,  # another version
        compute_key("simple_string", "1", strings, {}).digest,  # another model
        compute_key(MODEL, "1", inputs, {"sequence_id": 1}).digest,  # other parameters
    ]
    return [encode_entry(digest, tensors, time.time() + 3600) for digest in digests]


# -- one run, and its report -------------------------------------------------------------------


@dataclass
class ChaosReport:
    """The figures of a run (targets: failed 0, wrong 0)."""

    duration_s: float
    clients: int
    servers: int
    sent: int
    failed: int
    wrong: int
    max_latency_s: float
    p99_latency_s: float
    #: the longest request that started in each phase (phases without a slow one are left out)
    stalls_s: dict[str, float]
    statuses: dict[str, int]
    resume_s: list[float | None]
    #: ``cachefleet_cache_errors_total`` by kind, summed over the servers (corrupt: refused).
    cache_errors: dict[str, float]
    faults: FaultLog
    examples: list[str]


def run_chaos(
    urls: list[str], redis: RedisControl, options: ChaosOptions, log: Log = print
) -> ChaosReport:
    """Load every server in ``urls`` from client processes while ``redis`` misbehaves."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    conductor = _Conductor(redis, options, log)
    started = time.time()
    stop_at = started + options.duration_s + 2.0  # spawned clients take a moment to start
    clients = [
        context.Process(
            target=_client_main,
            args=(index, urls, stop_at, options.request_timeout_s, results),
            daemon=True,
        )
        for index in range(options.clients)
    ]
    for client in clients:
        client.start()
    planter = threading.Thread(target=conductor.plant_forever, daemon=True)
    planter.start()
    try:
        conductor.schedule(stop_at)
        gathered = _gather(results, clients, stop_at + options.request_timeout_s + 30)
    finally:
        conductor.stop.set()
        planter.join(10)
        for client in clients:
            if client.is_alive():
                client.kill()
    return _report(gathered, conductor.faults, urls, options, time.time() - started)


def _gather(results: Any, clients: list[Any], deadline: float) -> list[ClientResult]:
    gathered: list[ClientResult] = []
    while len(gathered) < len(clients):
        try:
            gathered.append(results.get(timeout=max(0.1, deadline - time.time()))[1])
        except queue.Empty:
            raise RuntimeError(f"only {len(gathered)} of {len(clients)} clients reported") from None
    for client in clients:
        client.join(10)
    return gathered


def _report(
    results: list[ClientResult],
    faults: FaultLog,
    urls: list[str],
    options: ChaosOptions,
    elapsed_s: float,
) -> ChaosReport:
    latencies = sorted(x for r in results for x in r.latencies_s)
    hits = sorted(x for r in results for x in r.hit_redis_at)
    statuses: dict[str, int] = {}
    for result in results:
        for status, count in result.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return ChaosReport(
        duration_s=elapsed_s,
        clients=options.clients,
        servers=len(urls),
        sent=sum(r.sent for r in results),
        failed=sum(r.failed for r in results),
        wrong=sum(r.wrong for r in results),
        max_latency_s=latencies[-1] if latencies else 0.0,
        p99_latency_s=latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
        stalls_s=_stalls(results, faults),
        statuses=statuses,
        resume_s=[_first_after(hits, back) for back in faults.back_at],
        cache_errors=_error_counts(urls),
        faults=faults,
        examples=[example for r in results for example in r.examples][:10],
    )


def _stalls(results: list[ClientResult], faults: FaultLog) -> dict[str, float]:
    stalls: dict[str, float] = {}
    for started, elapsed in (slow for r in results for slow in r.slow):
        phase = faults.phase_at(started)
        stalls[phase] = max(stalls.get(phase, 0.0), elapsed)
    return stalls


def _first_after(times: list[float], moment: float) -> float | None:
    later = [t - moment for t in times if t >= moment]
    return min(later) if later else None


def _error_counts(urls: list[str]) -> dict[str, float]:
    """``cachefleet_cache_errors_total`` of every server, summed by ``kind``."""
    counts: dict[str, float] = {}
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith("cachefleet_cache_errors_total{"):
                kind = line.split('kind="', 1)[1].split('"', 1)[0]
                counts[kind] = counts.get(kind, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def render_table(report: ChaosReport) -> str:
    """The report as a Markdown table (the README's Reliability section shows one)."""
    resumed = [r for r in report.resume_s if r is not None]
    resume = (
        f"{max(resumed):.2f} s (worst of {len(report.resume_s)} restarts"
        f", median {statistics.median(resumed):.2f} s)"
        if resumed
        else "never"
    )
    if len(resumed) < len(report.resume_s):
        resume += f"; {len(report.resume_s) - len(resumed)} restart(s) never saw hits again"
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
    errors = ", ".join(f"{k} {v:.0f}" for k, v in sorted(report.cache_errors.items()))
    stalls = ", ".join(
        f"{phase} {report.stalls_s[phase] * 1000:.0f} ms"
        for phase in (STEADY, "redis down", "after restart", "redis paused", "redis full")
        if phase in report.stalls_s
    )
    faults = collections.Counter(
        f"{phase}: {what}" for _, phase, what in report.faults.events if phase != STEADY
    )
    rows = [
        ("requests sent", f"{report.sent} ({statuses})"),
        ("failed (target 0)", str(report.failed)),
        ("wrong answers (target 0)", str(report.wrong)),
        ("longest stall (max latency)", f"{report.max_latency_s * 1000:.0f} ms"),
        ("longest stall by phase", stalls),
        ("p99 latency", f"{report.p99_latency_s * 1000:.1f} ms"),
        ("Redis hits resume after restart", resume),
        ("planted entries written / refused by the servers",
         f"{report.faults.planted} / {report.cache_errors.get('corrupt', 0):.0f}"),
        ("cache errors counted by the servers", errors),
        ("faults", "; ".join(f"{what} x{n}" for what, n in sorted(faults.items()))),
    ]  # fmt: skip
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


# -- cachefleet bench --chaos ------------------------------------------------------------------


class _BenchRedis:
    """The bench run's own redis-server, killed and started again on one port."""

    def __init__(self, workdir: Path) -> None:
        from cachefleet.bench.processes import free_port

        self.port = free_port()
        self.workdir = workdir
        self.process: Any = None

    def start(self) -> None:
        import shutil

        from cachefleet.bench.processes import ManagedProcess

        binary = shutil.which("redis-server") or "redis-server"
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.process = ManagedProcess(
            "redis-server", command, self.workdir / "redis.log", dict(os.environ)
        )
        self.process.wait_until(self._answers, 15)

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.3).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.process.poll() is None:
            self.process.process.kill()
            self.process.process.wait(10)
            self.process.stop()  # closes its log

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@contextlib.contextmanager
def _fleet(workdir: Path) -> Iterator[tuple[list[str], _BenchRedis]]:
    from cachefleet.bench.harness import write_samples
    from cachefleet.bench.processes import start_server

    repository = write_samples(workdir / "models")
    redis = _BenchRedis(workdir)
    redis.start()
    servers = []
    try:
        url = f"redis://127.0.0.1:{redis.port}/0"
        for _ in range(2):
            servers.append(start_server(repository, "tiered", url, workdir, None))
        yield [base for _, base in servers], redis
    finally:
        for server, _ in servers:
            server.stop()
        redis.stop()


def run_command(args: argparse.Namespace) -> int:
    """``cachefleet bench --chaos [--duration S] [--output DIR] [--name STEM]``."""
    duration = args.duration if args.duration is not None else 120.0
    options = ChaosOptions(duration_s=duration, clients=4, cycle_s=min(30.0, duration))
    load_before = os.getloadavg()[0]
    print(f"cachefleet bench --chaos: {duration:g} s, {options.clients} client processes, "
          "2 tiered servers, 1 Redis", flush=True)  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="cachefleet-chaos-") as folder,
        _fleet(Path(folder)) as (urls, redis),
    ):
        report = run_chaos(urls, redis, options, lambda line: print(line, flush=True))
    table = render_table(report)
    command = "cachefleet bench " + shlex.join(sys.argv[2:] if len(sys.argv) > 1 else [])
    name = args.name or f"chaos-{datetime.now(UTC):%Y-%m-%d}"
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / f"{name}.md"
    path.write_text(
        f"# Chaos run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n\n`{command}`\n\n"
        f"{report.duration_s:.0f} s, {report.clients} client processes, {report.servers} "
        f"servers (`--cache tiered`), one Redis, {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after (other processes "
        f"included).\n\n{table}\n" + "".join(f"\n- {example}" for example in report.examples)
    )
    print(table)
    print(f"wrote {path}")
    return 0 if report.failed == 0 and report.wrong == 0 else 2
