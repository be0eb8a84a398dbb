"""What the lifespan builds and the routes use."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import NotReadyError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.service import InferenceService, ModelControl, SharedMemoryRegistry
from cachefleet.runtime.service.request_budget import RequestBudget
from cachefleet.runtime.tracing.pipeline import TracingPipeline
from cachefleet.runtime.tracing.switch import Exporter


def _package_version() -> str:
    try:
        return version("cachefleet")
    except PackageNotFoundError:
        return "0.0.0"


@dataclass
class ServerState:
    """The server's parts; ``service`` and ``metrics`` stay None until the lifespan runs."""

    settings: RuntimeSettings
    service: InferenceService | None = None
    control: ModelControl | None = None
    shared_memory: SharedMemoryRegistry | None = None
    metrics: RuntimeMetrics | None = None
    version: str = field(default_factory=_package_version)
    #: The span exporter OTEL_* asks for, read once when the server is made; None: no tracing.
    trace_exporter: Exporter | None = None
    #: The span pipeline, while the lifespan runs (only when ``trace_exporter`` is set).
    tracing: TracingPipeline | None = None
    #: Requests and request bytes in flight, shared by HTTP and gRPC (see its module).
    budget: RequestBudget = field(init=False)

    def __post_init__(self) -> None:
        limits = self.settings.limits
        self.budget = RequestBudget(limits.max_requests_in_flight, limits.max_inflight_bytes)

    def ready_service(self) -> InferenceService:
        if self.service is None:
            raise NotReadyError("the server is still loading its models")
        return self.service

    def ready_control(self) -> ModelControl:
        if self.control is None:
            raise NotReadyError("the server is still loading its models")
        return self.control

    def ready_shared_memory(self) -> SharedMemoryRegistry:
        if self.shared_memory is None:
            raise NotReadyError("the server is still loading its models")
        return self.shared_memory

    def request_budget(self) -> RequestBudget:
        return self.budget

    def ready_metrics(self) -> RuntimeMetrics:
        if self.metrics is None:
            raise NotReadyError("the server is still starting")
        return self.metrics
