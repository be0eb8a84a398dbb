"""`cachefleet operator`: run the operator with kopf, taking kopf run's options.

The options are declared here (not passed through blindly) so ``--help`` lists them and a typo
fails fast; they are handed to ``kopf run`` unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachefleet.operator.reconcile.lease import LeaseElector

HELP = "run the operator (takes kopf run's options: -A, -n NS, --liveness URL, ...)."
HANDLERS_MODULE = "cachefleet.operator.handlers"
#: The modules of pyproject's ``operator`` extra (a test keeps them equal): the server's image
#: and a plain ``pip install cachefleet`` lack them, and the command says so in one line.
EXTRA_MODULES = (
    "kopf",
    "aiohttp",
    "kubernetes",
    "urllib3",
    "dateutil",
    "redis",
    "prometheus_client",
)
MISSING_EXTRA = (
    "cachefleet operator: {module} is not installed; the operator needs the operator extra: "
    "pip install 'cachefleet[operator]'"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace")
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="serve this namespace (repeatable)"
    )
    parser.add_argument(
        "-L", "--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the operator's Prometheus metrics at http://0.0.0.0:PORT/metrics (a standby "
        "too: it reports cachefleet_operator_leader 0)",
    )
    parser.add_argument("--standalone", action="store_true", help="ignore peering, run alone")
    parser.add_argument(
        "--leader-election",
        metavar="LEASE",
        help="run only while holding this Lease in the operator's namespace (implies "
        "--standalone; for several replicas, one writes at a time)",
    )
    for flag, default, what in (
        ("--lease-duration", 15.0, "how long a standby waits after the last change it saw"),
        ("--lease-renew-deadline", 10.0, "how long the leader tries to renew before it stops"),
        ("--lease-retry-period", 2.0, "how often the leader renews and a standby retries"),
    ):
        parser.add_argument(flag, type=float, default=default, metavar="SECONDS",
                            help=f"leader election: {what} (default {default:g})")  # fmt: skip
    parser.add_argument("-P", "--peering", help="kopf peering object name (for several replicas)")
    parser.add_argument("-p", "--priority", type=int, help="peering priority")
    parser.add_argument("--dev", action="store_true", help="kopf development mode")
    parser.add_argument("-v", "--verbose", action="store_true", help="verbose logs")
    parser.add_argument("-d", "--debug", action="store_true", help="debug logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--log-format", choices=("plain", "full", "json"), help="log format")


def kopf_arguments(args: argparse.Namespace) -> list[str]:
    """The ``kopf run`` command line for these options."""
    argv = ["run", "-m", HANDLERS_MODULE]
    argv += ["--all-namespaces"] if args.all_namespaces else []
    for namespace in args.namespace:
        argv += ["--namespace", namespace]
    for flag in ("liveness", "peering", "priority", "log_format"):
        value = getattr(args, flag)
        if value is not None:
            argv.append(f"--{flag.replace('_', '-')}={value}")
    if getattr(args, "leader_election", None):
        args.standalone = True  # the Lease picks the one writer; kopf's peering must not pause it
    for switch in ("standalone", "dev", "verbose", "debug", "quiet"):
        if getattr(args, switch):
            argv.append(f"--{switch}")
    return argv


def missing_module() -> str | None:
    """The first module of the operator extra that cannot be imported, or None."""
    for module in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return module
    return None


#: glibc's ``M_ARENA_MAX`` (malloc.h) and the arenas the operator's threads share.
_M_ARENA_MAX = -8
MALLOC_ARENAS = 2


def bound_malloc_arenas() -> None:
    """At most ``MALLOC_ARENAS`` glibc malloc arenas (as ``MALLOC_ARENA_MAX=2`` would), before
    any thread starts: glibc gives each thread that allocates under contention an arena of its
    own (up to eight per core), and the operator's handler, status, resync and dialer threads
    each parse API answers, so each arena keeps its own high-water mark of freed memory that
    the process's resident size never gives back. Where the C library is not glibc (musl), or
    ``MALLOC_ARENA_MAX`` is set, nothing changes."""
    import ctypes
    import os

    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, MALLOC_ARENAS)


def run(args: argparse.Namespace) -> int:
    module = missing_module()
    if module is not None:
        print(MISSING_EXTRA.format(module=module), file=sys.stderr)
        return 2  # as for a usage error: nothing ran
    from kopf.cli import main as kopf_main

    if not args.all_namespaces and not args.namespace:
        args.all_namespaces = True  # the chart's default: serve the whole cluster
    argv = kopf_arguments(args)
    bound_malloc_arenas()
    if args.metrics_port is not None:
        from cachefleet.operator.reconcile.metrics import serve_metrics

        serve_metrics(args.metrics_port)
    if not args.leader_election:
        kopf_main(args=argv, prog_name="cachefleet operator", standalone_mode=True)
        return 0
    from cachefleet.operator.reconcile.leadership import leading

    with leading(_elector(args), args.liveness):
        kopf_main(args=argv, prog_name="cachefleet operator", standalone_mode=True)
    return 0


def _elector(args: argparse.Namespace) -> LeaseElector:
    """The elector for ``--leader-election``, named after the pod (``POD_ID``)."""
    import os
    import socket

    import kubernetes

    from cachefleet.operator.reconcile.kube import Kube, single_attempt_client
    from cachefleet.operator.reconcile.lease import LeaseElector, LeaseTimings
    from cachefleet.operator.reconcile.settings import OperatorSettings

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    timings = LeaseTimings(args.lease_duration, args.lease_renew_deadline, args.lease_retry_period)
    namespace = OperatorSettings.from_environ().operator_namespace
    identity = os.environ.get("POD_ID") or socket.gethostname()
    from cachefleet.operator.reconcile.metrics import process_metrics

    kube = Kube(single_attempt_client(), metrics=process_metrics())
    return LeaseElector(kube, namespace, args.leader_election, identity, timings)
