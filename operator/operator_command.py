"""`cachefleet operator`: run the operator with kopf, taking kopf run's options.

The options are declared here (not passed through blindly) so ``--help`` lists them and a typo
fails fast; they are handed to ``kopf run`` unchanged.
"""

from __future__ import annotations

import argparse

HELP = "run the operator (takes kopf run's options: -A, -n NS, --liveness URL, ...)."
HANDLERS_MODULE = "cachefleet.operator.handlers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace")
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="serve this namespace (repeatable)"
    )
    parser.add_argument(
        "-L", "--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument("--standalone", action="store_true", help="ignore peering, run alone")
    parser.add_argument(
        "--leader-election",
        metavar="LEASE",
        help="run only while holding this Lease in the operator's namespace (implies "
        "--standalone; for several replicas, one writes at a time)",
    )
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


def run(args: argparse.Namespace) -> int:
    from kopf.cli import main as kopf_main

    if not args.all_namespaces and not args.namespace:
        args.all_namespaces = True  # the chart's default: serve the whole cluster
    argv = kopf_arguments(args)
    if args.leader_election:
        _lead(args.leader_election)
    kopf_main(args=argv, prog_name="cachefleet operator", standalone_mode=True)
    return 0


def _lead(lease: str) -> None:
    """Wait for the Lease, then keep it in a thread; losing it stops kopf (SIGTERM), so the pod
    restarts as a standby."""
    import os
    import signal
    import socket
    import threading

    import kubernetes

    from cachefleet.operator.reconcile.kube import Kube
    from cachefleet.operator.reconcile.lease import LeaseElector
    from cachefleet.operator.reconcile.settings import OperatorSettings

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    namespace = OperatorSettings.from_environ().operator_namespace
    identity = os.environ.get("POD_ID") or socket.gethostname()
    elector = LeaseElector(Kube(), namespace, lease, identity)
    elector.acquire()

    def lost() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    stop = threading.Event()
    threading.Thread(target=elector.keep, args=(lost, stop), daemon=True).start()
