"""``inference.GRPCInferenceService`` but inference: each method calls the service on the loop.

Health, metadata, configuration, the repository, statistics and shared memory: each method
takes the parsed request and the loop's stand-in context (``loop_bridge``), calls the same
``service`` the HTTP side calls, and builds the response message (``documents``). Errors end the
call through the one mapping (``errors.translated``). Inference (``ModelInfer``,
``ModelStreamInfer``) is ``infer``'s.
"""

from __future__ import annotations

from typing import Any

import grpc

from cachefleet.runtime.composition import Runtime, package_version
from cachefleet.runtime.errors import BadRequestError, ServingError
from cachefleet.runtime.grpc import documents
from cachefleet.runtime.grpc.decode import parameters
from cachefleet.runtime.grpc.errors import translated
from cachefleet.runtime.grpc.loop_bridge import LoopContext
from cachefleet.runtime.grpc.messages import service_pb2
from cachefleet.runtime.protocol import server_metadata

Context = LoopContext
#: Why ``TraceSetting`` is refused on a server that may well be tracing.
TRACE_SETTING_REFUSAL = (
    "trace settings cannot be changed by TraceSetting: tracing is set from the OTEL_* "
    "environment variables when the server starts"
)
#: Unload parameters Triton's clients may send that change nothing here (no ensembles).
_IGNORED_UNLOAD_PARAMETERS = frozenset({"unload_dependents"})


class InferenceServicer:
    """Triton's gRPC methods but inference, over the runtime's service layer, on the loop."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._service = runtime.service
        self._version = package_version()

    @translated
    async def ServerLive(self, request: Any, context: Context) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    @translated
    async def ServerReady(self, request: Any, context: Context) -> Any:
        # Served only while the runtime is open: started after it, stopped before it closes.
        # Not ready while a model asked for has not loaded (--strict-readiness), as HTTP.
        return service_pb2.ServerReadyResponse(ready=not self._runtime.unready_models())

    @translated
    async def ModelReady(self, request: Any, context: Context) -> Any:
        """Ready or not, as Triton answers: an unknown model is not ready, not an error."""
        try:
            self._service.check_model(request.name, request.version or None)
        except ServingError:
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=True)

    @translated
    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        return service_pb2.ServerMetadataResponse(**server_metadata(self._version))

    @translated
    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        document = self._service.model_metadata(request.name, request.version or None)
        return documents.model_metadata(document)

    @translated
    async def ModelConfig(self, request: Any, context: Context) -> Any:
        document = self._service.model_config(request.name, request.version or None)
        return documents.model_config(document)

    @translated
    async def RepositoryIndex(self, request: Any, context: Context) -> Any:
        _check_repository(request.repository_name)
        rows = self._service.index(ready_only=request.ready)
        return documents.repository_index(rows)

    @translated
    async def RepositoryModelLoad(self, request: Any, context: Context) -> Any:
        _check_repository(request.repository_name)
        control = self._runtime.control
        await control.load(request.model_name, parameters(request.parameters))
        return service_pb2.RepositoryModelLoadResponse()

    @translated
    async def RepositoryModelUnload(self, request: Any, context: Context) -> Any:
        _check_repository(request.repository_name)
        unknown = sorted(set(request.parameters) - _IGNORED_UNLOAD_PARAMETERS)
        if unknown:
            raise BadRequestError(f"unknown unload parameters {unknown}")
        await self._runtime.control.unload(request.model_name)
        return service_pb2.RepositoryModelUnloadResponse()

    @translated
    async def ModelStatistics(self, request: Any, context: Context) -> Any:
        """Every loaded model without a name, every loaded version without a version."""
        document = self._service.statistics(request.name or None, request.version or None)
        return documents.model_statistics(document)

    @translated
    async def SystemSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        self._runtime.shared_memory.register_system(
            request.name, request.key, request.offset, request.byte_size
        )
        return service_pb2.SystemSharedMemoryRegisterResponse()

    @translated
    async def SystemSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        regions = self._runtime.shared_memory.system_status(request.name or None)
        return documents.system_shared_memory_status(regions)

    @translated
    async def SystemSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        self._runtime.shared_memory.unregister_system(request.name or None)
        return service_pb2.SystemSharedMemoryUnregisterResponse()

    @translated
    async def CudaSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        """Refused with the registry's message: CUDA shared memory is not supported."""
        self._runtime.shared_memory.register_cuda(
            request.name, request.device_id, request.byte_size
        )
        return service_pb2.CudaSharedMemoryRegisterResponse()

    @translated
    async def CudaSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        regions = self._runtime.shared_memory.cuda_status(request.name or None)
        return documents.cuda_shared_memory_status(regions)

    @translated
    async def CudaSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        self._runtime.shared_memory.unregister_cuda(request.name or None)
        return service_pb2.CudaSharedMemoryUnregisterResponse()

    @translated
    async def TraceSetting(self, request: Any, context: Context) -> Any:
        """Refused: the server traces, but its tracing is set once, from the ``OTEL_*``
        environment at start (``tracing.switch``), not changed by a call."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, TRACE_SETTING_REFUSAL)

    @translated
    async def LogSettings(self, request: Any, context: Context) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "log settings are not supported")


def _check_repository(name: str) -> None:
    """The server has one, unnamed, model repository (Triton's with one --model-repository)."""
    if name:
        raise BadRequestError(f"unknown model repository {name!r}: this server has one, unnamed")
