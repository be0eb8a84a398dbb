"""What the upstream run measures, in order, and which core each process gets.

"On one core each": cachefleet gets one core and Triton the other, for the whole run, so the
same Triton process answers alone and behind cachefleet. The load generator goes on the core
the measured server does not use: beside cachefleet when Triton is measured alone, beside
Triton when cachefleet is (Triton is idle on hits; on misses it shares its core with the
generator, which the report says).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cachefleet.bench.pinning import CpuPlan
from cachefleet.bench.scenarios import Scenario, Server, Transport

MODELS: tuple[str, ...] = ("simple", "densenet_onnx")
Side = Literal["triton", "front"]
Generator = Literal["wrk", "perf_analyzer"]
Section = Literal["hits", "misses"]
SIDE_NAMES: dict[Side, str] = {
    "triton": "Triton alone",
    "front": "cachefleet -> Triton",
}
SECTION_TITLES: dict[Section, str] = {
    "hits": "(a) 100% hits: cachefleet's local cache in front of Triton vs Triton's local cache",
    "misses": "(b) 0% hits: the miss through the hop vs Triton alone without a cache",
}


@dataclass(frozen=True)
class UpstreamScenario:
    """One timed load on one side: a hit or a miss scenario, by one generator."""

    section: Section
    model: str
    side: Side
    generator: Generator = "wrk"
    #: Concurrent connections; None: the run's ``--connections``.
    connections: int | None = None

    @property
    def transport(self) -> str:
        return "gRPC" if self.generator == "perf_analyzer" else "HTTP"

    @property
    def scenario(self) -> Scenario:
        """The harness's scenario for :func:`cachefleet.bench.measure.measure`: warmed, probed
        and counted as a cachefleet local cache or as Triton is."""
        ratio = 1.0 if self.section == "hits" else 0.0
        server: Server = "triton" if self.side == "triton" else "cachefleet"
        transport: Transport = "grpc" if self.generator == "perf_analyzer" else "http"
        return Scenario(
            self.section, self.model, "local", ratio, server=server, transport=transport
        )

    @property
    def label(self) -> str:
        conns = "" if self.connections is None else f", {self.connections} conn"
        return (
            f"{self.model} {self.section} {SIDE_NAMES[self.side]} by {self.generator} "
            f"({self.transport}{conns})"
        )


def build(models: Sequence[str], perf_analyzer: bool) -> list[UpstreamScenario]:
    """Per model, each side back to back: hits by wrk, by perf_analyzer (when it is here), then
    misses by wrk at the run's concurrency and at one connection (a miss's own latency)."""
    plan: list[UpstreamScenario] = []
    generators: tuple[Generator, ...] = ("wrk", "perf_analyzer") if perf_analyzer else ("wrk",)
    sides: tuple[Side, ...] = ("triton", "front")
    for model in models:
        plan += [UpstreamScenario("hits", model, s, g) for g in generators for s in sides]
        for connections in (None, 1):
            plan += [UpstreamScenario("misses", model, s, "wrk", connections) for s in sides]
    return plan


@dataclass(frozen=True)
class Pins:
    """The cores of the run (None everywhere: unpinned)."""

    front: str | None
    triton: str | None

    @classmethod
    def of(cls, cpus: CpuPlan) -> Pins:
        return cls(cpus.server, cpus.client)

    def generator(self, side: Side) -> str | None:
        """The core the measured side's server does not use."""
        return self.front if side == "triton" else self.triton

    @property
    def description(self) -> str:
        if self.front is None:
            return "unpinned (taskset missing or fewer than 2 CPUs)"
        return (
            f"cachefleet on CPU {self.front}, Triton on CPU {self.triton} (ONNX Runtime with 1 "
            "intra-op thread), for the whole run; the load generator on the core the measured "
            f"server does not use: CPU {self.front} when Triton is measured alone, CPU "
            f"{self.triton} (beside Triton) through cachefleet; in the fleet, the 4 replicas or "
            f"the 4 Tritons on CPU {self.front}, and Redis, the fleet's one Triton and the "
            f"load generator on CPU {self.triton}"
        )
