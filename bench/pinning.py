"""CPU pinning with ``taskset``: server and load generator on separate cores steadies figures.

On a 2-core machine the server, its ONNX Runtime threads, Redis and the load generator all
compete; pinning the server to one core and everything else to the other makes runs repeatable
and keeps the load generator from stealing the server's time. Without ``taskset`` or with a
single CPU, commands run unpinned.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the server side and the client side (load generator, Redis, peer) get."""

    server: str | None
    client: str | None

    @property
    def description(self) -> str:
        if self.server is None:
            return "unpinned (taskset missing or fewer than 2 CPUs)"
        return (
            f"server on CPU {self.server} (ONNX Runtime with 1 intra-op thread); "
            f"load generator and Redis on CPU {self.client}"
        )

    @property
    def server_args(self) -> list[str]:
        """One ONNX Runtime thread for a server pinned to one CPU: more would only contend."""
        return ["--intra-op-threads", "1"] if self.server is not None else []


def plan(enabled: bool = True) -> CpuPlan:
    """Server on CPU 0 and the rest on CPU 1 when possible (ours and the peer alike)."""
    cpus = sorted(os.sched_getaffinity(0))
    if not enabled or len(cpus) < 2 or shutil.which("taskset") is None:
        return CpuPlan(None, None)
    return CpuPlan(str(cpus[0]), ",".join(str(cpu) for cpu in cpus[1:]))


def pinned(command: list[str], cpus: str | None) -> list[str]:
    """``command`` under ``taskset -c cpus``, or unchanged when ``cpus`` is None."""
    return ["taskset", "-c", cpus, *command] if cpus else command
