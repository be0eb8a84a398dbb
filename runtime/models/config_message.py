"""Triton's own ``ModelConfig`` protobuf message, from the generated code tritonclient ships.

``tritonclient.grpc.model_config_pb2`` is protoc's output for Triton's ``model_config.proto``, so
a config.pbtxt parses here exactly as Triton parses it and its JSON is Triton's JSON. It is
imported on first use: the module pulls in grpc, which the rest of a process may never need.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf import message

#: A ``inference.ModelConfig`` message (tritonclient ships no type stubs for it).
ConfigMessage = Any


@functools.cache
def model_config_class() -> type[message.Message]:
    """The ``inference.ModelConfig`` class of tritonclient's generated ``model_config_pb2``."""
    from tritonclient.grpc import model_config_pb2

    cls: type[message.Message] = model_config_pb2.ModelConfig
    return cls


def new_model_config(**fields: Any) -> ConfigMessage:
    """An empty (or partly filled) ``ModelConfig`` message."""
    return model_config_class()(**fields)
