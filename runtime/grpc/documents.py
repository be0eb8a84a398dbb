"""Metadata documents (the JSON the HTTP side returns) as their gRPC messages.

The service builds each document once, in Triton's JSON shape; the gRPC messages have the same
field names, so they are filled by protobuf's own JSON mapping instead of field by field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from cachefleet.runtime.grpc.messages import model_config_pb2, service_pb2


def model_metadata(document: Mapping[str, Any]) -> Any:
    return json_format.ParseDict(dict(document), service_pb2.ModelMetadataResponse())


def model_config(document: Mapping[str, Any]) -> Any:
    """``ModelConfigResponse``. The document is the JSON of the model's own ModelConfig message,
    so it parses back exactly; a field it does not know would be a bug, and fails loudly."""
    config = json_format.ParseDict(dict(document), model_config_pb2.ModelConfig())
    return service_pb2.ModelConfigResponse(config=config)


def repository_index(rows: Sequence[Mapping[str, Any]]) -> Any:
    return json_format.ParseDict({"models": list(rows)}, service_pb2.RepositoryIndexResponse())


def model_statistics(document: Mapping[str, Any]) -> Any:
    """``ModelStatisticsResponse`` from the service's document (already in its field names);
    the fields Triton's message has no place for (``cache_admission``) are HTTP's only."""
    return json_format.ParseDict(
        dict(document), service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True
    )


def system_shared_memory_status(regions: Sequence[Mapping[str, Any]]) -> Any:
    """``SystemSharedMemoryStatusResponse``: the regions keyed by name, as Triton answers."""
    return json_format.ParseDict(
        {"regions": {region["name"]: dict(region) for region in regions}},
        service_pb2.SystemSharedMemoryStatusResponse(),
    )


def cuda_shared_memory_status(regions: Sequence[Mapping[str, Any]]) -> Any:
    return json_format.ParseDict(
        {"regions": {region["name"]: dict(region) for region in regions}},
        service_pb2.CudaSharedMemoryStatusResponse(),
    )
