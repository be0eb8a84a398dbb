"""One served pass (``status.served``) at scale: many services, several ready pods each.

``python -m harness.served_scale [--services 1000] [--pods 5] [--pods-are answering|silent|
refused]`` (or ``bash scripts/harness served_scale ...``) starts the emulator (a real HTTP API
server on loopback, :mod:`harness.kube_emulator`) in this process, creates the services (each in
a namespace of its own: the emulator ignores label selectors, so a shared namespace would answer
every pod list with every pod) and their ready runtime pods, then runs the operator's own served
pass (``Periodic.run_pass`` over ``refresh_served``, with the operator's settings from the
environment) twice, in a process of its own as the operator runs, and prints a Markdown table.
That process first fills the operator's pod index from one cluster-wide, label-selected pod
list (what kopf's pod watch lists when it starts) and reads the services, all before the clock
starts; the first pass finds every ``status.served`` new and writes it, the second (the
services read again in between, as the watch would deliver them) finds nothing changed. For
each pass: its wall time, its process's CPU time, the API requests it sent by verb (counted by
the operator's own request counter, so they do not depend on the machine's load) and the
load average around it.

Where the pods are: ``answering`` is one real ``cachefleet serve`` on the sample models, which
every pod's address points at (5,000 config requests to one server); ``silent`` is a socket that
accepts and never answers, so each dial costs the whole timeout (a NetworkPolicy that drops the
operator's packets costs the same); ``refused`` is a closed port. The emulator (Python, on the
same machine) answers the pass's pod lists and status writes more slowly than an API server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachefleet.bench.processes import ServerProcess, free_port

CIS = "cachefleet.io/v1alpha1/cachedinferenceservices"
MODEL = {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}


@dataclass
class Result:
    services: int
    pods: int
    where: str
    concurrency: int = 0
    timeout_s: float = 0.0
    budget_s: float = 0.0
    pass_s: float = 0.0
    written: int = 0
    answered: int = 0
    cpu_s: float = 0.0
    #: Each pass's figures (the whole pass against the emulator): wall, CPU, requests, load.
    passes: list[dict[str, Any]] = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("services x ready pods", f"{self.services} x {self.pods}"),
            ("pods", self.where),
            ("served concurrency / timeout / budget",
             f"{self.concurrency} / {self.timeout_s:g} s / "
             + (f"{self.budget_s:g} s" if self.budget_s else "none")),
            ("services whose status.served was written", str(self.written)),
            ("pods that reported a fingerprint", str(self.answered)),
        ]  # fmt: skip
        if not self.passes:  # the dials alone
            rows += [("one served pass (wall)", f"{self.pass_s:.1f} s"),
                     ("CPU of the pass's process", f"{self.cpu_s:.1f} s")]  # fmt: skip
        for number, figures in enumerate(self.passes, 1):
            requests = ", ".join(f"{n} {verb}" for verb, n in sorted(figures["requests"].items()))
            rows += [
                (f"pass {number}: wall / CPU",
                 f"{figures['pass_s']:.1f} s / {figures['cpu_s']:.1f} s"),
                (f"pass {number}: API requests", requests or "none"),
                (f"pass {number}: load average (1 min) before / after",
                 f"{figures['load_before']:.1f} / {figures['load_after']:.1f}"),
            ]  # fmt: skip
        lines = ["| | |", "|---|---|"] + [f"| {name} | {value} |" for name, value in rows]
        return "\n".join(lines)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def _pods_at(where: str, logdir: Path) -> Iterator[int]:
    """The port every pod's address points at."""
    if where == "answering":
        from cachefleet.runtime.samples.repository import write_samples

        repository = logdir / "models"
        write_samples(repository, ("simple",))
        server = ServerProcess(["--model-repository", str(repository), "--cache", "local"], logdir)
        server.start()
        try:
            yield server.port
        finally:
            server.stop()
    elif where == "silent":
        with socket.create_server(("127.0.0.1", 0), backlog=4096) as hole:
            yield hole.getsockname()[1]
    else:
        yield free_port()


def _service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "cachefleet.io/v1alpha1", "kind": "CachedInferenceService",
        "metadata": {"name": "svc", "namespace": namespace},
        "spec": {"model": MODEL, "cache": {"mode": "local"}},
    }  # fmt: skip


def _pod(namespace: str, index: int, port: int) -> dict[str, Any]:
    from cachefleet.operator.manifests.meta import Owner, labels

    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"svc-{index}", "namespace": namespace,
                     "labels": labels(Owner("svc", namespace), "runtime")},
        "spec": {"containers": [{"name": "server", "image": "x",
                                 "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"podIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


async def _create(session: Any, bodies: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    limit = asyncio.Semaphore(32)

    async def send(path: str, body: dict[str, Any]) -> Any:
        async with limit, session.post(path, json=body) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    return list(await asyncio.gather(*(send(path, body) for path, body in bodies)))


async def run(services: int, pods: int, where: str, passes: int = 3) -> Result:
    import aiohttp

    from cachefleet.operator.reconcile.settings import OperatorSettings
    from harness.kube_emulator import Cluster, served

    settings = OperatorSettings.from_environ()
    result = Result(services, pods, where, settings.served_concurrency,
                    settings.served_timeout_s, settings.served_pass_budget_s)  # fmt: skip
    namespaces = [f"team-{i:04d}" for i in range(services)]
    with tempfile.TemporaryDirectory() as folder, _pods_at(where, Path(folder)) as port:
        cluster = Cluster(forget_requests=True)
        async with served(cluster, Path(folder)) as (url, kubeconfig):
            async with aiohttp.ClientSession(base_url=url) as session:
                await _create(session, [
                    (f"/apis/{CIS.split('/', 2)[0]}/v1alpha1/namespaces/{ns}/"
                     "cachedinferenceservices", _service(ns)) for ns in namespaces
                ])  # fmt: skip
                await _create(session, [
                    (f"/api/v1/namespaces/{ns}/pods", _pod(ns, j, port))
                    for ns in namespaces for j in range(pods)
                ])  # fmt: skip
            # The passes run in a process of their own, as the operator does: sharing this
            # one's interpreter with the emulator would measure the emulator's lock, not them.
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "harness.served_scale", "--run-passes",
                "--passes", str(passes),
                env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await child.communicate()
            result.passes = json.loads(out.decode().strip().splitlines()[-1])
            result.pass_s, result.cpu_s = result.passes[0]["pass_s"], result.passes[0]["cpu_s"]
            for ns in namespaces:
                try:
                    status = cluster.objects[CIS, ns, "svc"].raw.get("status") or {}
                except KeyError:
                    continue
                if "served" in status:
                    result.written += 1
                    result.answered += sum(1 for s in status["served"] if s["fingerprint"])
    return result


def _listed(host: str, path: str) -> list[dict[str, Any]]:
    """A list from the emulator with no client of the operator's (not counted as the pass's)."""
    import urllib.request

    with urllib.request.urlopen(f"{host}{path}") as answer:
        return list(json.loads(answer.read())["items"])


async def run_passes(passes_run: int) -> list[dict[str, Any]]:
    """``passes_run`` served passes of the operator over every service (against
    ``$KUBECONFIG``), the pod index filled as the operator's watch fills it; each one's
    figures."""
    import kubernetes

    from cachefleet.operator.manifests.meta import MANAGER
    from cachefleet.operator.reconcile.kube import Kube
    from cachefleet.operator.reconcile.locks import KeyedLocks
    from cachefleet.operator.reconcile.metrics import OperatorMetrics
    from cachefleet.operator.reconcile.periodic import Periodic
    from cachefleet.operator.reconcile.pod_index import pod_entry, pod_key
    from cachefleet.operator.reconcile.reconciler import Reconciler
    from cachefleet.operator.reconcile.settings import OperatorSettings

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    host = str(kubernetes.client.Configuration.get_default_copy().host).rstrip("/")
    index: dict[Any, list[dict[str, Any]]] = {}
    managed = f"app.kubernetes.io/managed-by%3D{MANAGER}"
    for pod in await asyncio.to_thread(_listed, host, f"/api/v1/pods?labelSelector={managed}"):
        meta = pod["metadata"]
        index.setdefault(pod_key(meta["namespace"], meta["labels"]), []).append(pod_entry(pod))
    metrics = OperatorMetrics()
    reconciler = Reconciler(
        Kube(metrics=metrics),
        OperatorSettings.from_environ(),
        pods=lambda namespace, labels: index.get(pod_key(namespace, labels), []),
    )
    passes = Periodic(reconciler, KeyedLocks())
    figures = []
    for _ in range(passes_run):
        services = await asyncio.to_thread(_listed, host, f"/apis/{CIS}")
        before = _requests(metrics)
        load, cpu, began = os.getloadavg()[0], _cpu_s(), time.monotonic()
        await passes.run_pass(passes.refresh_served, services)
        figures.append({
            "pass_s": time.monotonic() - began, "cpu_s": _cpu_s() - cpu,
            "load_before": load, "load_after": os.getloadavg()[0],
            "requests": {verb: n - before.get(verb, 0) for verb, n in _requests(metrics).items()
                         if n > before.get(verb, 0)},
        })  # fmt: skip
    return figures


def _requests(metrics: Any) -> dict[str, int]:
    """The operator's API requests so far, by verb (its own counter)."""
    counted: dict[str, int] = {}
    for metric in metrics.kube_requests.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):  # code "none": no answer in the client's timeout
                verb = f"{sample.labels['verb']} ({sample.labels['code']})"
                counted[verb] = counted.get(verb, 0) + int(sample.value)
    return counted


def run_dials(services: int, pods: int, where: str) -> Result:
    """The pass's dials alone (no API server): each service's pods asked with the operator's
    dialer, ``served_concurrency`` services at once, as the pass does."""
    from concurrent.futures import ThreadPoolExecutor

    from cachefleet.operator.reconcile.served import Access, PodDialer
    from cachefleet.operator.reconcile.settings import OperatorSettings

    settings = OperatorSettings.from_environ()
    result = Result(services, pods, f"{where} (dials only, no API server)",
                    settings.served_concurrency, settings.served_timeout_s, 0.0)  # fmt: skip
    dialer = PodDialer(timeout_s=settings.served_timeout_s,
                       concurrency=settings.served_concurrency)  # fmt: skip
    with tempfile.TemporaryDirectory() as folder, _pods_at(where, Path(folder)) as port:
        addresses = [f"127.0.0.1:{port}"] * pods
        cpu, began = _cpu_s(), time.monotonic()
        with ThreadPoolExecutor(settings.served_concurrency) as pool:
            answers = list(pool.map(
                lambda _: dialer.ask_all(addresses, "simple", Access()), range(services)
            ))  # fmt: skip
        result.pass_s, result.cpu_s = time.monotonic() - began, _cpu_s() - cpu
    result.written = len(answers)
    result.answered = sum(1 for found in answers for fingerprint in found if fingerprint)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.served_scale")
    parser.add_argument("--services", type=int, default=1000, help="services (1000)")
    parser.add_argument("--pods", type=int, default=5, help="ready pods per service (5)")
    parser.add_argument("--pods-are", choices=("answering", "silent", "refused"),
                        default="answering", help="what the pods do (answering)")  # fmt: skip
    parser.add_argument("--dials-only", action="store_true",
                        help="time the pass's dials alone, without the emulator")  # fmt: skip
    parser.add_argument("--passes", type=int, default=3,
                        help="served passes, one after the other (3)")  # fmt: skip
    parser.add_argument("--run-passes", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_passes:
        print(json.dumps(asyncio.run(run_passes(args.passes))))
        return 0
    if args.dials_only:
        result = run_dials(args.services, args.pods, args.pods_are)
    else:
        result = asyncio.run(run(args.services, args.pods, args.pods_are, args.passes))
    print(result.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
