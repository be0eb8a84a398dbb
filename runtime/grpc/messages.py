"""The protocol's generated message and service modules, imported in one place.

``tritonclient.grpc`` ships the code generated from Triton's ``grpc_service.proto`` and
``model_config.proto``; using it (rather than copies of the ``.proto`` files) keeps the server
on exactly the messages Triton's own clients send.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

__all__ = ["model_config_pb2", "service_pb2", "service_pb2_grpc"]
