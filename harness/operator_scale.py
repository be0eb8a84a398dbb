"""The operator at scale: many CachedInferenceServices, one operator process, the kmock emulator.

``python -m harness.operator_scale [--count 100]`` (from the repository root, or ``bash
scripts/harness operator_scale --count 100``) starts the emulator (a real HTTP API server on
loopback, see :mod:`harness.kube_emulator`), runs ``cachefleet operator
--standalone --all-namespaces`` as its own process against it, creates ``count`` objects at once
(half with a managed Redis, a quarter local-only, a quarter external Redis with an HPA), waits
until every one has converged, then changes every spec and waits again. It prints a Markdown
table: time to converge, API requests, the operator process's CPU time and memory, and the CPU
time of the emulator (this process), which bounds the wall time on a small machine.

"Converged" is what an emulator can show, since no pod ever runs there: every child the spec asks
for exists (checked against a fixed list per shape, not the operator's own builders), and the
status is written for the current generation (``observedGeneration``) with ``Stalled=False``
and ``Reconciling=True`` (pods are never ready, so ``Ready`` stays False). After the spec
change, converged also means the Deployment carries the new replica count. A last phase writes
what the Deployment controller would once every runtime pod is ready (each Deployment's
status), and converged then means the service's ``RuntimeReady`` is True: the operator follows
its children's status through its watches, without a resync.

Memory is the operator process's resident set from ``/proc/<pid>/status``: ``VmRSS`` idle
(watching, no objects), when converged, and after a settle period, and ``VmHWM`` (its peak).
Redis calls of the operator (cache figures) go to a closed loopback port, so they fail at once;
with ``--unreachable-redis`` they go to a port that accepts and never answers, so each one
waits for the operator's Redis timeout (``--redis-timeout``, the operator's default 2 s): the
periodic passes' durations (from the operator's log) then show what unreachable Redis costs.
After the phases the run settles (``--settle``) with nothing changing: the requests in that
window, per object per minute, are the operator's steady load on the API server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachefleet.bench.processes import free_port

NAMESPACE = "bench"
CIS = "cachefleet.io/v1alpha1/cachedinferenceservices"
MODEL = {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}
# (The runtime ConfigMap is named by its content: converged() finds it through the Deployment.)
RUNTIME_CHILDREN = (
    ("v1/services", "{}"),
    ("apps/v1/deployments", "{}"),
)
REDIS_CHILDREN = (
    ("v1/secrets", "{}-redis-auth"),
    ("v1/configmaps", "{}-redis-config"),
    ("v1/services", "{}-redis-headless"),
    ("v1/services", "{}-redis"),
    ("apps/v1/statefulsets", "{}-redis"),
    ("policy/v1/poddisruptionbudgets", "{}-redis"),
    ("networking.k8s.io/v1/networkpolicies", "{}-redis"),
)
EXTERNAL = {"mode": "redis", "redis": {"external": {"url": "redis://shared:6379/0"}}}


@dataclass(frozen=True)
class Shape:
    """One kind of service in the mix, and the children (resource, name) it must get."""

    name: str
    spec: Mapping[str, Any]
    children: tuple[tuple[str, str], ...]
    autoscaled: bool = False


SHAPES = (
    Shape("tiered", {"replicas": 2}, REDIS_CHILDREN + RUNTIME_CHILDREN),
    Shape("tiered", {"replicas": 2}, REDIS_CHILDREN + RUNTIME_CHILDREN),
    Shape("local", {"replicas": 1, "cache": {"mode": "local"}}, RUNTIME_CHILDREN),
    Shape(
        "external+hpa",
        {
            "cache": EXTERNAL,
            "runtime": {"resources": {"requests": {"cpu": "1"}}},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
        },
        (*RUNTIME_CHILDREN, ("autoscaling/v2/horizontalpodautoscalers", "{}")),
        autoscaled=True,
    ),
)


@dataclass(frozen=True)
class Service:
    name: str
    shape: Shape

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": "cachefleet.io/v1alpha1",
            "kind": "CachedInferenceService",
            "metadata": {"name": self.name, "namespace": NAMESPACE},
            "spec": {"model": MODEL, **self.shape.spec},
        }


def services(count: int) -> list[Service]:
    return [Service(f"svc-{i:03d}", SHAPES[i % len(SHAPES)]) for i in range(count)]


Lookup = Callable[[str, str], dict[str, Any] | None]


def lookup(cluster: Any) -> Lookup:
    """Read one live object from the emulator's store (None when missing or deleted)."""

    def get(resource: str, name: str) -> dict[str, Any] | None:
        try:
            obj = cluster.objects[resource, NAMESPACE, name]
        except KeyError:
            return None
        return None if obj.deleted else dict(obj.raw)

    return get


DEPLOYMENTS = "apps/v1/deployments"


def _runtime_config(deployment: Mapping[str, Any] | None) -> str:
    """The name of the settings ConfigMap the runtime Deployment mounts ("" when none)."""
    pod = ((deployment or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    names = [v["configMap"]["name"] for v in pod.get("volumes") or [] if v["name"] == "config"]
    return names[0] if names else ""


def converged(
    get: Lookup, service: Service, *, generation: int = 1, replicas: int = 0, runtime_ready: int = 0
) -> bool:
    """Every child exists and the status describes this generation (see the module docstring)."""
    if any(
        get(resource, name.format(service.name)) is None
        for resource, name in service.shape.children
    ):
        return False
    if get("v1/configmaps", _runtime_config(get(DEPLOYMENTS, service.name))) is None:
        return False
    body = get(CIS, service.name) or {}
    status = body.get("status") or {}
    if status.get("observedGeneration") != generation:
        return False
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if runtime_ready:
        return conditions.get("RuntimeReady") == "True"
    if conditions.get("Stalled") != "False" or conditions.get("Reconciling") != "True":
        return False
    if replicas and not service.shape.autoscaled:
        deployment = get("apps/v1/deployments", service.name) or {}
        return bool((deployment.get("spec") or {}).get("replicas") == replicas)
    return True


def pending(get: Lookup, items: Iterable[Service], **want: int) -> list[Service]:
    return [s for s in items if not converged(get, s, **want)]


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass
class Memory:
    """Resident memory of one process, from /proc (Linux)."""

    pid: int

    def read(self) -> dict[str, int]:
        figures: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                figures[key] = int(value.split()[0]) * 1024
        return figures

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    name: str
    objects: int
    seconds: float
    per_object_s: list[float]
    requests: int
    cpu_s: float
    emulator_cpu_s: float
    rss: int


@dataclass
class Result:
    count: int
    idle_rss: int = 0
    settled_rss: int = 0
    settle_s: float = 0.0
    settle_requests: int = 0
    peak_rss: int = 0
    phases: list[Phase] = field(default_factory=list)
    redis: str = ""
    passes: dict[str, list[float]] = field(default_factory=dict)


async def wait_converged(
    get: Lookup, items: list[Service], started: dict[str, float], timeout_s: float, **want: int
) -> dict[str, float]:
    """Poll until every item converged; returns each one's seconds from its start time."""
    left, took = list(items), {}
    deadline = time.monotonic() + timeout_s
    while left:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} of {len(items)} objects did not converge")
        await asyncio.sleep(0.25)
        still = pending(get, left, **want)
        now = time.monotonic()
        waiting = {s.name for s in still}
        for done in left:
            if done.name not in waiting:
                took[done.name] = now - started[done.name]
        left = still
    return took


def _blackhole() -> tuple[Any, int]:
    """A listening socket nobody accepts from: connections hang until the client's timeout."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    return server, server.getsockname()[1]


PASS_LINE = re.compile(r"periodic (\w+) pass: (\d+) services in ([0-9.]+) s")


def pass_durations(log_text: str) -> dict[str, list[float]]:
    """Each periodic job's pass durations, in order, from the operator's log."""
    found: dict[str, list[float]] = collections.defaultdict(list)
    for match in PASS_LINE.finditer(log_text):
        found[match.group(1)].append(float(match.group(3)))
    return dict(found)


async def run(
    count: int,
    *,
    settle_s: float,
    timeout_s: float,
    log: Path,
    unreachable_redis: bool = False,
    redis_timeout_s: float = 0.2,
    skip_change: bool = False,
) -> Result:
    import aiohttp

    from harness.kube_emulator import Cluster, served

    result = Result(count)
    cluster = Cluster(forget_requests=True)
    with tempfile.TemporaryDirectory() as folder, log.open("wb") as log_file:
        async with served(cluster, Path(folder)) as (url, kubeconfig):
            port = free_port()
            hole, hole_port = _blackhole() if unreachable_redis else (None, free_port())
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-m",
                "cachefleet.cli.main",
                "operator",
                "--standalone",
                "--all-namespaces",
                f"--liveness=http://127.0.0.1:{port}/healthz",
                env={
                    **os.environ,
                    "KUBECONFIG": str(kubeconfig),
                    "CACHEFLEET_OPERATOR_REDIS_ADDRESS": f"127.0.0.1:{hole_port}",
                    "CACHEFLEET_OPERATOR_REDIS_TIMEOUT": str(redis_timeout_s),
                },
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
            )
            memory = Memory(process.pid)
            result.redis = (
                f"unreachable (accepts, never answers; timeout {redis_timeout_s:g} s)"
                if unreachable_redis
                else "refused at once (closed port)"
            )
            try:
                async with aiohttp.ClientSession(base_url=url) as session:
                    await _wait_live(port, timeout_s=60)
                    await asyncio.sleep(1.0)
                    result.idle_rss = memory.read()["VmRSS"]
                    await _phases(session, cluster, memory, result, count, timeout_s, skip_change)
                    before = cluster.handled
                    await asyncio.sleep(settle_s)
                    result.settle_s, result.settle_requests = settle_s, cluster.handled - before
                    figures = memory.read()
                    result.settled_rss, result.peak_rss = figures["VmRSS"], figures["VmHWM"]
            finally:
                await _stop(process)
                if hole is not None:
                    hole.close()
    return result


async def _phases(
    session: Any,
    cluster: Any,
    memory: Memory,
    result: Result,
    count: int,
    timeout_s: float,
    skip_change: bool = False,
) -> None:
    get = lookup(cluster)
    items = services(count)
    path = f"/apis/cachefleet.io/v1alpha1/namespaces/{NAMESPACE}/cachedinferenceservices"

    async def send(method: str, target: str, body: Any, content_type: str) -> None:
        headers = {"Content-Type": content_type}
        async with session.request(method, target, json=body, headers=headers) as response:
            if response.status >= 300:
                raise RuntimeError(f"{method} {target}: {await response.text()}")

    async def phase(name: str, write: Callable[[Service], Any], **want: int) -> None:
        requests_before, cpu_before = cluster.handled, memory.cpu_s()
        emulator_before = time.process_time()
        began = time.monotonic()
        started = {}
        for service in items:
            started[service.name] = time.monotonic()
            await write(service)
        took = await wait_converged(get, items, started, timeout_s, **want)
        seconds = time.monotonic() - began
        requests = cluster.handled - requests_before - count  # less the writes sent here
        rss = memory.read()["VmRSS"]
        per = sorted(took.values())
        result.phases.append(
            Phase(
                name,
                count,
                seconds,
                per,
                requests,
                memory.cpu_s() - cpu_before,
                time.process_time() - emulator_before,
                rss,
            )
        )

    await phase("create", lambda s: send("POST", path, s.body(), "application/json"), generation=1)
    if not skip_change:
        await phase(
            "change every spec (replicas 3)",
            lambda s: send(
                "PATCH", f"{path}/{s.name}", {"spec": {"replicas": 3}},
                "application/merge-patch+json",
            ),
            generation=2,
            replicas=3,
        )  # fmt: skip

    def pods_ready(service: Service) -> Any:
        deployment = get(DEPLOYMENTS, service.name) or {}
        wanted = int((deployment.get("spec") or {}).get("replicas") or 1)
        counts = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
        status: dict[str, Any] = dict.fromkeys(counts, wanted)
        status["observedGeneration"] = (deployment.get("metadata") or {}).get("generation")
        target = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{service.name}/status"
        return send("PATCH", target, {"status": status}, "application/merge-patch+json")

    await phase("runtime pods ready (Deployment status)", pods_ready, runtime_ready=1)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGINT (kopf's graceful stop), then SIGKILL if it has not gone within 20 s."""
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()


async def _wait_live(port: int, *, timeout_s: float) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("the operator's liveness endpoint did not answer")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _mib(count: int) -> str:
    return f"{count / 2**20:.0f} MiB"


def report(result: Result) -> str:
    items = services(result.count)
    mix = collections.Counter(s.shape.name for s in items)
    children = sum(len(s.shape.children) for s in items)
    lines = [
        f"Operator scale: {result.count} CachedInferenceServices "
        f"({', '.join(f'{n} {name}' for name, n in mix.items())}; {children} children), "
        f"one operator process, kmock emulator, {os.cpu_count()} CPUs",
        "",
        "| phase | objects | all converged | per object p50 / max | operator API requests "
        "| operator CPU | emulator CPU | operator RSS after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in result.phases:
        per = phase.per_object_s
        lines.append(
            f"| {phase.name} | {phase.objects} | {phase.seconds:.1f} s "
            f"| {statistics.median(per):.1f} s / {max(per):.1f} s "
            f"| {phase.requests} ({phase.requests / phase.objects:.0f} per object) "
            f"| {phase.cpu_s:.1f} s | {phase.emulator_cpu_s:.1f} s | {_mib(phase.rss)} |"
        )
    if result.settle_s:
        per_minute = result.settle_requests / result.count / result.settle_s * 60
        lines += [
            "",
            f"Settled, nothing changing: {result.settle_requests} API requests in "
            f"{result.settle_s:.0f} s ({per_minute:.1f} per object per minute: the operator's "
            f"periodic resync and cache figures).",
        ]
    if result.passes:
        lines += ["", f"Periodic passes (Redis {result.redis}), from the operator's log:", ""]
        lines += ["| pass | passes | first | longest | last |", "|---|---|---|---|---|"]
        for job, durations in sorted(result.passes.items()):
            lines.append(
                f"| {job} | {len(durations)} | {durations[0]:.1f} s | {max(durations):.1f} s "
                f"| {durations[-1]:.1f} s |"
            )
    lines += [
        "",
        f"Operator memory (VmRSS of its process): idle {_mib(result.idle_rss)}, "
        f"settled {_mib(result.settled_rss)} after the run, peak (VmHWM) {_mib(result.peak_rss)}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.operator_scale")
    parser.add_argument("--count", type=int, default=100, help="objects to create (100)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before the last RSS")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per phase (600)")
    parser.add_argument(
        "--log", type=Path, default=Path(tempfile.gettempdir()) / "cachefleet-operator-scale.log",
        help="where the operator's own output goes",
    )  # fmt: skip
    parser.add_argument(
        "--unreachable-redis", action="store_true",
        help="Redis calls hang until the timeout instead of being refused at once",
    )  # fmt: skip
    parser.add_argument(
        "--redis-timeout", type=float, default=0.2, help="the operator's Redis timeout (0.2 s)"
    )
    parser.add_argument(
        "--skip-change", action="store_true",
        help="no spec change phase (the settled load at a large count, in less time)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    result = asyncio.run(
        run(
            args.count,
            settle_s=args.settle,
            timeout_s=args.timeout,
            log=args.log,
            unreachable_redis=args.unreachable_redis,
            redis_timeout_s=args.redis_timeout,
            skip_change=args.skip_change,
        )
    )
    result.passes = pass_durations(args.log.read_text(errors="replace"))
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
