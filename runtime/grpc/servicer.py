"""``inference.GRPCInferenceService``: each method decodes, calls the service, encodes.

Inference goes through :meth:`InferenceService.answer`, the same path as HTTP's, so both
transports share the models, the cache (one entry for the same tensors), single-flight and the
metrics. How the cache answered goes back as ``x-cache`` trailing metadata, the gRPC counterpart
of the ``X-Cache`` header (trailing: it rides on the status, where initial metadata costs one
more message per call, measured at 8% of the server's time on cache hits); ``cache-control``
request metadata opts out as the header does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.composition import Runtime, package_version
from cachefleet.runtime.errors import BadRequestError, ServingError
from cachefleet.runtime.grpc import documents
from cachefleet.runtime.grpc.decode import decode_infer_request, parameters, request_cost
from cachefleet.runtime.grpc.encode import encode_infer_response
from cachefleet.runtime.grpc.errors import error_status, translated
from cachefleet.runtime.grpc.handlers import Malformed
from cachefleet.runtime.grpc.messages import service_pb2, service_pb2_grpc
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import directives_from, server_metadata
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.service import InferAnswer

Context = grpc.aio.ServicerContext[Any, Any]
#: Unload parameters Triton's clients may send that change nothing here (no ensembles).
_IGNORED_UNLOAD_PARAMETERS = frozenset({"unload_dependents"})


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """Triton's gRPC service over the runtime's service layer."""

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
        return service_pb2.ServerReadyResponse(ready=True)

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
    async def ModelInfer(self, request: Any, context: Context) -> Any:
        response, status = await self._infer(request, directives_of(context))
        context.set_trailing_metadata((("x-cache", status),))
        return response

    async def ModelStreamInfer(
        self, requests: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        """One response per request, in order; a failed request answers with its error message
        and the stream goes on, as Triton's stream does for models that are not decoupled."""
        directives = directives_of(context)
        async for request in requests:
            if isinstance(request, Malformed):
                message = f"malformed request message: {request.reason}"
                yield service_pb2.ModelStreamInferResponse(error_message=message)
                continue
            try:
                response, _ = await self._infer(request, directives)
            except Exception as error:  # said in band: the stream goes on for the other requests
                _, message = error_status(error, "ModelStreamInfer")
                yield service_pb2.ModelStreamInferResponse(error_message=message)
                continue
            yield service_pb2.ModelStreamInferResponse(infer_response=response)

    async def _infer(self, request: Any, directives: CacheDirectives) -> tuple[Any, str]:
        """Admitted against the request budget (as HTTP's are) for as long as it is answered."""
        budget = self._runtime.budget
        cost = request_cost(request)
        if not budget.try_enter(cost):
            await budget.wait(cost)
        try:
            return await self._answer(request, directives)
        finally:
            budget.leave(cost)

    async def _answer(self, request: Any, directives: CacheDirectives) -> tuple[Any, str]:
        shared_memory = self._runtime.shared_memory

        def decode(config: ModelConfig) -> InferRequest:
            return decode_infer_request(request, config, shared_memory.for_request())

        def render(answer: InferAnswer) -> tuple[Any, str]:
            return encode_infer_response(answer), answer.cache_status.value

        return await self._service.answer(
            request.model_name,
            request.model_version or None,
            decode,
            render,
            directives,
            transport="grpc",
        )

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
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "tracing is not supported")

    @translated
    async def LogSettings(self, request: Any, context: Context) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "log settings are not supported")


def directives_of(context: Context) -> CacheDirectives:
    for key, value in context.invocation_metadata() or ():
        if key == "cache-control":
            return directives_from(value if isinstance(value, str) else value.decode())
    return directives_from(None)


def _check_repository(name: str) -> None:
    """The server has one, unnamed, model repository (Triton's with one --model-repository)."""
    if name:
        raise BadRequestError(f"unknown model repository {name!r}: this server has one, unnamed")
