"""The operator at scale on a real control plane: many quickstarts at once on kwok's nodes.

``bash scripts/harness plane_scale --services 1000 --nodes 200`` starts the plane the cluster tests
use (``tests/support/plane.py``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kwok, built once per machine by ``scripts/build-plane``) with ``--nodes`` kwok nodes (one in
ten with four ``nvidia.com/gpu``), installs the CRD and ``deploy/`` with kubectl, and runs
``cachefleet operator`` as a process with the chart's arguments under a token of ``deploy/``'s
ServiceAccount (its real RBAC). It then applies ``--services`` copies of
``examples/quickstart.yaml`` at once (server-side applies, ``--apply-workers`` at a time, as
``kubectl apply --server-side`` sends each) and prints a Markdown report:

- seconds from the apply until every service is ``Ready`` (the scheduler placed each pod, kwok
  ran it, the Deployment controller counted it ready, the operator followed), and each service's
  own time to Ready (median and slowest);
- the operator process's peak resident memory (``VmHWM``), its memory and CPU-seconds when all
  are Ready and at the end;
- the operator's API requests per second: API Priority and Fairness counts every request it
  dispatches by flow schema, and the operator is the only client of ``service-accounts`` (the
  controllers run as kube-system's service accounts, the scheduler has its own schema, kwok and
  this harness are admins, exempt);
- throttling: the Python client has no client-side rate limiter, so what would throttle the
  operator is the server's (requests APF queued or rejected) and kopf's own backoff after a
  failed watch or patch (its "Throttling for" log lines); all three are counted;
- watch events: what the operator's watches received, counted on watches of this harness with
  the same resources and label selectors (the API server sends both the same events);
- the periodic passes from the operator's log, the first full resync and served pass that end
  after every service is Ready among them.

The plane, the operator and this harness share the machine's cores: the report gives the load
average before and after, and the CPU-seconds each plane process spent, to read the figures by.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The plane's starter is the cluster tests' own (tests/support): one way to start it.
sys.path.insert(0, str(ROOT / "tests"))

from support.cluster_operator import OPERATOR_NAMESPACE, service_account_token  # noqa: E402
from support.plane import NodeSpec, Plane, plane_bin  # noqa: E402
from support.processes import CACHEFLEET, ManagedProcess, free_port  # noqa: E402

from harness.operator_scale import Memory  # noqa: E402

NAMESPACE = "scale"
CIS_PATH = f"/apis/cachefleet.io/v1alpha1/namespaces/{NAMESPACE}/cachedinferenceservices"
MANAGED = "app.kubernetes.io/managed-by=cachefleet-operator"
#: The resources the operator watches with a label selector (``handlers.configure``): its
#: children's kinds but Secret, and pods. kopf skips a resource whose API is not served.
CHILD_WATCHES = (
    "/api/v1/configmaps",
    "/api/v1/services",
    "/api/v1/pods",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/statefulsets",
    "/apis/policy/v1/poddisruptionbudgets",
    "/apis/networking.k8s.io/v1/networkpolicies",
    "/apis/autoscaling/v2/horizontalpodautoscalers",
)
#: The flow schema of every service account outside kube-system: here, the operator's.
FLOW_SCHEMA = "service-accounts"
PASS_LINE = re.compile(r"periodic (\w+) pass: (\d+) services in ([0-9.]+) s")
THROTTLE_LINE = re.compile(r"Throttling for")
#: kopf's line when a service's first reconcile has succeeded, stamped in the process's local time.
CREATED_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] kopf\.objects .*Creation is processed",
    re.MULTILINE,
)


# ---------------------------------------------------------------------------------------------
# Processes, read from /proc (harness.operator_scale.Memory)
# ---------------------------------------------------------------------------------------------


def _cpu_s_if_running(pid: int) -> float:
    """A process's CPU-seconds so far, 0 once it has gone (its /proc entry with it)."""
    try:
        return Memory(pid).cpu_s()
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------------------------
# Watches of this harness: readiness, and the operator's events counted
# ---------------------------------------------------------------------------------------------


class Client:
    """An HTTP client of the API server as its admin (the plane's client certificate)."""

    def __init__(self, plane: Plane) -> None:
        pki = plane.folder / "pki"
        context = ssl.create_default_context(cafile=str(plane.ca))
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self.http = httpx.Client(
            base_url=plane.server, verify=context, timeout=httpx.Timeout(30.0, read=None)
        )

    def stream(self, path: str, params: Mapping[str, str]) -> Iterator[bytes]:
        """The lines of one watch, from now on (``resourceVersion`` unset: the list first)."""
        with self.http.stream("GET", path, params={"watch": "1", **params}) as response:
            response.raise_for_status()
            yield from response.iter_lines()  # type: ignore[misc]

    def apply_all(self, bodies: Sequence[Mapping[str, Any]], *, workers: int) -> None:
        """Server-side apply of every body, ``workers`` at a time, as ``kubectl apply
        --server-side`` sends each (its field manager, strict field validation). kubectl itself
        applies one object after another: at a thousand objects on a loaded machine, that is
        minutes of waiting the operator has no part in."""

        def apply(body: Mapping[str, Any]) -> None:
            name = body["metadata"]["name"]
            response = self.http.patch(
                f"{CIS_PATH}/{name}",
                params={"fieldManager": "kubectl", "fieldValidation": "Strict"},
                content=orjson.dumps(body),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            response.raise_for_status()

        with ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(apply, body) for body in bodies]:
                done.result()

    def metrics(self) -> str:
        response = self.http.get("/metrics")
        response.raise_for_status()
        return response.text


@dataclass
class Readiness:
    """Each service's first time Ready, from a watch of the namespace's services."""

    started: float = 0.0
    ready_at: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def follow(self, client: Client, stop: threading.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                for line in client.stream(CIS_PATH, {"timeoutSeconds": "60"}):
                    if stop.is_set():
                        return
                    self._event(orjson.loads(line))

    def _event(self, event: Mapping[str, Any]) -> None:
        body = event.get("object") or {}
        name = (body.get("metadata") or {}).get("name")
        if not name or event.get("type") not in ("ADDED", "MODIFIED"):
            return
        conditions = (body.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        with self.lock:
            self.seen.add(name)
            if ready and name not in self.ready_at:
                self.ready_at[name] = time.monotonic()

    def count(self) -> int:
        with self.lock:
            return len(self.ready_at)


@dataclass
class EventCount:
    """Events on the watches the operator holds, by resource, from ``since`` on."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    counting: bool = False

    def follow(self, client: Client, path: str, stop: threading.Event) -> None:
        params = {"labelSelector": MANAGED, "allowWatchBookmarks": "false",
                  "timeoutSeconds": "3600"}  # fmt: skip
        with contextlib.suppress(httpx.HTTPError):
            for line in client.stream(path, params):
                if stop.is_set():
                    return
                if self.counting and line:
                    self.counts[path.rsplit("/", 1)[1]] += 1


def _threads(*targets: Any) -> list[threading.Thread]:
    started = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in started:
        thread.start()
    return started


# ---------------------------------------------------------------------------------------------
# The API server's own counters (API Priority and Fairness)
# ---------------------------------------------------------------------------------------------


def _samples(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


@dataclass(frozen=True)
class Flow:
    """The operator's flow schema's counters at one moment."""

    dispatched: float
    rejected: float
    waited_s: float
    waits: float

    @classmethod
    def read(cls, client: Client) -> Flow:
        text = client.metrics()
        wait = "apiserver_flowcontrol_request_wait_duration_seconds"
        return cls(
            _samples(text, "apiserver_flowcontrol_dispatched_requests_total",
                     flow_schema=FLOW_SCHEMA),
            _samples(text, "apiserver_flowcontrol_rejected_requests_total",
                     flow_schema=FLOW_SCHEMA),
            _samples(text, f"{wait}_sum", flow_schema=FLOW_SCHEMA),
            _samples(text, f"{wait}_count", flow_schema=FLOW_SCHEMA),
        )  # fmt: skip

    def since(self, before: Flow) -> Flow:
        return Flow(self.dispatched - before.dispatched, self.rejected - before.rejected,
                    self.waited_s - before.waited_s, self.waits - before.waits)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def quickstarts(count: int) -> list[dict[str, Any]]:
    """``count`` copies of the quickstart, named ``qs-0000`` on."""
    body = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    return [{**body, "metadata": {"name": f"qs-{index:04d}", "namespace": NAMESPACE}}
            for index in range(count)]  # fmt: skip


def nodes(count: int) -> list[NodeSpec]:
    """``count`` kwok nodes, one in ten (at least one) with four GPUs."""
    gpus = max(1, count // 10)
    return [NodeSpec(f"kwok-gpu-{i}", gpus=4) for i in range(gpus)] + [
        NodeSpec(f"kwok-cpu-{i}") for i in range(count - gpus)
    ]


@dataclass
class Result:
    services: int
    nodes: int
    plane_start_s: float = 0.0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    apply_s: float = 0.0
    ready_s: float = 0.0
    per_service_s: list[float] = field(default_factory=list)
    idle_rss: int = 0
    ready_rss: int = 0
    end_rss: int = 0
    peak_rss: int = 0
    idle_cpu_s: float = 0.0
    ready_cpu_s: float = 0.0
    end_cpu_s: float = 0.0
    flow: Flow = Flow(0, 0, 0, 0)
    end_flow: Flow = Flow(0, 0, 0, 0)
    end_s: float = 0.0
    watch_events: dict[str, int] = field(default_factory=dict)
    end_watch_events: dict[str, int] = field(default_factory=dict)
    throttled: int = 0
    passes: list[tuple[float, str, int, float]] = field(default_factory=list)
    #: Seconds from the apply to each service's first reconcile done (the operator's share of
    #: the time to Ready; the rest is the controllers', the scheduler's and kwok's).
    created_s: list[float] = field(default_factory=list)
    plane_cpu_s: dict[str, float] = field(default_factory=dict)


def run(
    services: int,
    node_count: int,
    *,
    folder: Path,
    resync_interval_s: float,
    timeout_s: float,
    apply_workers: int,
    extra_env: Mapping[str, str],
    controller_qps: int | None = None,
) -> Result:
    found = plane_bin()
    if found is None:
        raise SystemExit("the control plane is not built: bash scripts/build-plane")
    result = Result(services, node_count, load_before=os.getloadavg())
    plane = Plane(found, folder / "plane", nodes=nodes(node_count), persistent_volumes=0,
                  controller_qps=controller_qps)  # fmt: skip
    stop = threading.Event()
    operator: ManagedProcess | None = None
    try:
        plane.start()
        result.plane_start_s = plane.start_s
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/cachedinferenceservices.cachefleet.io")  # fmt: skip
        plane.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "cachefleet.yaml"))
        plane.kubectl("create", "namespace", NAMESPACE)
        operator = _operator(plane, folder, resync_interval_s, extra_env)
        proc = Memory(operator.pid)
        client = Client(plane)
        readiness, events = Readiness(), EventCount()
        _threads(lambda: readiness.follow(client, stop),
                 *(lambda p=p: events.follow(client, p, stop) for p in CHILD_WATCHES))  # fmt: skip
        time.sleep(5.0)  # the operator's watches and the harness's have started
        result.idle_rss, result.idle_cpu_s = proc.read()["VmRSS"], _cpu_s_if_running(proc.pid)
        bodies = quickstarts(services)
        before = Flow.read(client)
        events.counting = True
        began, began_wall = time.monotonic(), time.time()
        client.apply_all(bodies, workers=apply_workers)
        result.apply_s = time.monotonic() - began
        _wait(lambda: readiness.count() >= services, operator, began + timeout_s,
              lambda: f"{readiness.count()} of {services} Ready")  # fmt: skip
        now = time.monotonic()
        result.ready_s = now - began
        result.per_service_s = sorted(t - began for t in readiness.ready_at.values())
        result.ready_rss, result.ready_cpu_s = proc.read()["VmRSS"], _cpu_s_if_running(proc.pid)
        result.flow = Flow.read(client).since(before)
        result.watch_events = dict(events.counts)
        # The first resync and served pass that end after every service is Ready.
        logged = len(_passes(operator))

        def after_ready() -> bool:
            names = {name for _, name, _, _ in _passes(operator)[logged:]}
            return {"resync", "refresh_served"} <= names

        _wait(after_ready, operator, time.monotonic() + resync_interval_s + timeout_s,
              lambda: "a resync and a served pass after all Ready")  # fmt: skip
        result.end_s = time.monotonic() - began
        result.end_flow = Flow.read(client).since(before)
        result.end_watch_events = dict(events.counts)
        figures = proc.read()
        result.end_rss, result.peak_rss, result.end_cpu_s = (
            figures["VmRSS"], figures["VmHWM"], _cpu_s_if_running(proc.pid))  # fmt: skip
        log = operator.log_path.read_text(errors="replace")
        result.throttled = len(THROTTLE_LINE.findall(log))
        result.passes = _passes(operator)
        result.created_s = _created_s(log, began_wall)
        result.plane_cpu_s = {p.name: _cpu_s_if_running(p.pid) for p in plane.processes}
    finally:
        stop.set()
        if operator is not None:
            operator.stop()
        plane.stop()
    result.load_after = os.getloadavg()
    return result


def _operator(
    plane: Plane, folder: Path, resync_interval_s: float, extra_env: Mapping[str, str]
) -> ManagedProcess:
    """``cachefleet operator`` with the chart's arguments (one replica, all namespaces; no
    metrics port: it would listen beyond loopback), under deploy/'s ServiceAccount."""
    token = service_account_token(plane, "cachefleet-operator", OPERATOR_NAMESPACE)
    kubeconfig = plane.token_kubeconfig(folder / "operator.kubeconfig", token)
    port = free_port()
    command = [*CACHEFLEET, "operator", f"--liveness=http://127.0.0.1:{port}/healthz",
               "--standalone", "--all-namespaces"]  # fmt: skip
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POD_ID": "scale",
        "CACHEFLEET_OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
        "CACHEFLEET_OPERATOR_RESYNC_INTERVAL": f"{resync_interval_s:g}",
        **extra_env,
    }
    process = ManagedProcess("operator", command, folder / "operator.log", env)
    url = f"http://127.0.0.1:{port}/healthz"

    def live() -> bool:
        try:
            return httpx.Client(timeout=2).get(url).status_code == 200
        except httpx.HTTPError:
            return False

    process.wait_until(live, timeout_s=120)
    return process


def _passes(operator: ManagedProcess) -> list[tuple[float, str, int, float]]:
    """(position, job, services, seconds) of each periodic pass the operator logged."""
    text = operator.log_path.read_text(errors="replace")
    return [(m.start(), m.group(1), int(m.group(2)), float(m.group(3)))
            for m in PASS_LINE.finditer(text)]  # fmt: skip


def _created_s(log: str, began_wall: float) -> list[float]:
    """Seconds from ``began_wall`` to each "Creation is processed" line of the operator's log."""
    stamps = (datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
              for m in CREATED_LINE.finditer(log))  # fmt: skip
    return sorted(stamp.timestamp() - began_wall for stamp in stamps)  # naive: local time


def _wait(check: Any, operator: ManagedProcess, deadline: float, what: Any) -> None:
    while not check():
        if operator.process.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{operator.log_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out: {what()}\n{operator.log_tail()}")
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _mib(count: int) -> str:
    return f"{count / 2**20:.0f} MiB"


def _load(figures: Sequence[float]) -> str:
    return " / ".join(f"{f:.2f}" for f in figures)


def _last(seconds: Sequence[float]) -> str:
    return f"{max(seconds):.1f} s" if seconds else "none logged"


def report(result: Result, command: str) -> str:
    per = result.per_service_s
    flow, ready_s = result.flow, result.ready_s
    wait_ms = flow.waited_s / flow.waits * 1000 if flow.waits else 0.0
    watched = sum(result.watch_events.values())
    lines = [
        f"Operator scale on the real control plane: {result.services} quickstarts applied at once "
        f"on {result.nodes} kwok nodes, {os.cpu_count()} CPUs shared by the plane, the operator "
        "and this harness",
        "",
        f"`{command}`",
        "",
        f"Load average (1/5/15 min) before {_load(result.load_before)}, after "
        f"{_load(result.load_after)}; plane started in {result.plane_start_s:.0f} s.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| server-side apply of all {result.services} (as kubectl's) | {result.apply_s:.1f} s |",
        f"| all Ready, from the apply | **{ready_s:.1f} s** |",
        f"| one service's time to Ready, median / slowest | {statistics.median(per):.1f} s / "
        f"{max(per):.1f} s |",
        f"| the operator's first reconciles, the last done after | {_last(result.created_s)} "
        f"({len(result.created_s)} services) |",
        f"| operator peak RSS (VmHWM) | **{_mib(result.peak_rss)}** |",
        f"| operator RSS idle / all Ready / end | {_mib(result.idle_rss)} / "
        f"{_mib(result.ready_rss)} / {_mib(result.end_rss)} |",
        f"| operator CPU, apply to all Ready | **{result.ready_cpu_s - result.idle_cpu_s:.1f} s** "
        f"({(result.ready_cpu_s - result.idle_cpu_s) / ready_s:.2f} cores) |",
        f"| operator CPU, whole run (start, passes included) | {result.end_cpu_s:.1f} s |",
        f"| operator API requests, apply to all Ready | {flow.dispatched:.0f} "
        f"({flow.dispatched / ready_s:.1f}/s, {flow.dispatched / result.services:.1f} per "
        "service) |",
        f"| operator API requests, apply to end ({result.end_s:.0f} s) | "
        f"{result.end_flow.dispatched:.0f} ({result.end_flow.dispatched / result.end_s:.1f}/s) |",
        "| client-side throttling | none: the Python client has no rate limiter; kopf backed off "
        f"{result.throttled} times |",
        f"| server-side (APF) for the operator | {flow.rejected:.0f} rejected, mean queue wait "
        f"{wait_ms:.1f} ms |",
        f"| watch events to the operator, apply to all Ready | {watched} "
        f"({watched / ready_s:.0f}/s; CIS not counted) |",
    ]
    by = ", ".join(f"{k} {v}" for k, v in sorted(result.watch_events.items()))
    lines += ["", f"Watch events by resource (label-selected children): {by}.", ""]
    lines += ["Periodic passes, in the order the operator logged them:", ""]
    lines += ["| pass | services | seconds |", "|---|---|---|"]
    lines += [f"| {job} | {count} | {seconds:.1f} |" for _, job, count, seconds in result.passes]
    cpu = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.plane_cpu_s.items())
    lines += ["", f"CPU-seconds of the plane's processes over the run: {cpu}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash scripts/harness plane_scale")
    parser.add_argument("--services", type=int, default=1000, help="quickstarts (1000)")
    parser.add_argument("--nodes", type=int, default=200, help="kwok nodes (200)")
    parser.add_argument(
        "--resync-interval", type=float, default=300.0,
        help="the operator's resync interval (its default, 300 s): the run ends after the first "
             "resync and served pass that end once every service is Ready",
    )  # fmt: skip
    parser.add_argument(
        "--apply-workers", type=int, default=8, help="server-side applies at once (8)"
    )
    parser.add_argument(
        "--controller-qps", type=int,
        help="the controller-manager's client rate limit a second (its default: 20 for each "
             "controller, which the Deployment and ReplicaSet controllers reach in a burst)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per wait (900)")
    parser.add_argument("--folder", type=Path, help="the run's files (a temporary folder)")
    args = parser.parse_args(argv)
    command = "bash scripts/harness plane_scale " + " ".join(argv or sys.argv[1:])
    with contextlib.ExitStack() as stack:
        folder = args.folder or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        result = run(args.services, args.nodes, folder=folder,
                     resync_interval_s=args.resync_interval, timeout_s=args.timeout,
                     apply_workers=args.apply_workers, extra_env={},
                     controller_qps=args.controller_qps)  # fmt: skip
        print(report(result, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
