"""The scenarios of one benchmark run, side by side: cache modes, models, hit ratios, the peer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cachefleet.bench.bodies import Encoding

CACHE_MODES: tuple[str, ...] = ("none", "local", "redis", "tiered")
#: Opt-in modes over a three-primary Redis Cluster started by the harness, with the
#: ``--cache`` value each runs: ``--caches redis redis-cluster`` puts them side by side.
CLUSTER_CACHES: dict[str, str] = {"redis-cluster": "redis", "tiered-cluster": "tiered"}
MODELS: tuple[str, ...] = ("simple", "densenet_onnx")
SWEEP: tuple[float, ...] = (0.5, 0.9, 0.99)
QUICK_SWEEP: tuple[float, ...] = (0.9,)
#: The model and encoding on which our no-cache path is compared with KServe's server.
PEER_MODEL = "simple"
#: HTTP and gRPC are compared on each model at this hit ratio, with the local cache.
TRANSPORT_HIT_RATIO = 0.9
TRANSPORT_CACHE = "local"

#: The model whose 100%-hit request the HTTP floor (bench/http_floor.py) answers, canned, for
#: perf_analyzer (``--judge``), and the first of :data:`FLOOR_MODELS`.
FLOOR_MODEL = "simple"
#: The models whose 100%-hit requests the HTTP floor answers beside ours under wrk: a small
#: answer and a large body (600 KB).
FLOOR_MODELS: tuple[str, ...] = (FLOOR_MODEL, "densenet_onnx")
#: The cache modes perf_analyzer measures again, beside Triton, when it judges (``--judge``).
JUDGED_CACHES: tuple[str, ...] = ("local", "tiered")

Server = Literal["cachefleet", "kserve", "triton", "floor"]
Transport = Literal["http", "grpc"]
Group = Literal["hits", "judge", "sweep", "misses", "transport", "peer"]
GROUP_TITLES: dict[Group, str] = {
    "hits": "100% hits",
    "judge": "100% hits, measured by perf_analyzer (HTTP and gRPC)",
    "sweep": "hit-ratio sweep",
    "misses": "0% hits (miss-path cost)",
    "transport": "HTTP vs gRPC (Python clients in processes on both sides)",
    "peer": "JSON, no cache, vs KServe",
}


@dataclass(frozen=True)
class Scenario:
    """One timed load against one server configuration."""

    group: Group
    model: str
    cache: str
    hit_ratio: float
    encoding: Encoding = "binary"
    server: Server = "cachefleet"
    #: gRPC sends the same tensors as the binary HTTP body, in raw_input_contents.
    transport: Transport = "http"

    @property
    def body(self) -> str:
        """What goes over the wire: the encoding, with the transport where they are compared."""
        if self.group not in ("transport", "judge"):
            return self.encoding
        return "gRPC raw" if self.transport == "grpc" else f"HTTP {self.encoding}"

    @property
    def label(self) -> str:
        who = self.cache if self.server == "cachefleet" else self.server
        if self.server == "floor":
            who = "HTTP floor"
        label = f"{self.model} {self.body} {who} {self.hit_ratio:.0%}"
        return f"{label} by perf_analyzer" if self.group == "judge" else label


def build_plan(
    models: Sequence[str] = MODELS,
    caches: Sequence[str] = CACHE_MODES,
    sweep: Sequence[float] = SWEEP,
    peer: bool = True,
    triton: bool = False,
    grpc: bool = True,
    floor: bool = True,
    judge: Sequence[Transport] = (),
) -> list[Scenario]:
    """Every scenario, comparable ones adjacent: per model and hit ratio, each cache mode;
    then, with ``grpc``, each model at :data:`TRANSPORT_HIT_RATIO` over HTTP and over gRPC.

    With ``triton``, Triton's local response cache runs right after ours on the same model,
    once at 100% hits (the comparison) and once at 0% (reported, not compared: its model is a
    Python function there).

    With ``floor``, the HTTP floor (a bare uvicorn app answering each of :data:`FLOOR_MODELS`'
    requests with canned bytes) runs right after that model's 100%-hit scenarios, with the
    same load.

    With ``judge`` (transports: ``http``, ``grpc``), perf_analyzer measures the model's 100%
    hits again right after those, over each transport: our :data:`JUDGED_CACHES` among
    ``caches``, Triton with ``triton``, and over HTTP the floor with ``floor``.
    """
    plan: list[Scenario] = []
    if peer and PEER_MODEL in models:
        plan.append(Scenario("peer", PEER_MODEL, "none", 1.0, "json"))
        plan.append(Scenario("peer", PEER_MODEL, "none", 1.0, "json", "kserve"))
    cached = [cache for cache in caches if cache != "none"]
    for model in models:
        plan += [Scenario("hits", model, cache, 1.0) for cache in caches]
        if triton:
            plan.append(Scenario("hits", model, "local", 1.0, server="triton"))
        if floor and model in FLOOR_MODELS:
            plan.append(Scenario("hits", model, "none", 1.0, server="floor"))
        plan += _judged(model, caches, triton, floor, judge)
        for ratio in sweep:
            plan += [Scenario("sweep", model, cache, ratio) for cache in cached]
        plan += [Scenario("misses", model, cache, 0.0) for cache in caches]
        if triton:
            plan.append(Scenario("misses", model, "local", 0.0, server="triton"))
    if grpc:
        for model in models:
            plan += [
                Scenario("transport", model, TRANSPORT_CACHE, TRANSPORT_HIT_RATIO, transport=t)
                for t in ("http", "grpc")
            ]
    return plan


def _judged(
    model: str, caches: Sequence[str], triton: bool, floor: bool, transports: Sequence[Transport]
) -> list[Scenario]:
    """A model's 100%-hit scenarios for perf_analyzer, per transport: ours, Triton, the floor."""
    plan: list[Scenario] = []
    for transport in transports:
        plan += [
            Scenario("judge", model, cache, 1.0, transport=transport)
            for cache in JUDGED_CACHES
            if cache in caches
        ]
        if triton:
            plan.append(Scenario("judge", model, "local", 1.0, "binary", "triton", transport))
        if floor and model == FLOOR_MODEL and transport == "http":
            plan.append(Scenario("judge", model, "none", 1.0, "binary", "floor", transport))
    return plan
