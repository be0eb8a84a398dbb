"""Triton's ``ModelConfig`` protobuf schema, declared in Python (no protoc at build time).

Field names and numbers are Triton's (``model_config.proto``), so text and JSON forms of a
config are exactly Triton's. Only the messages the server reads, plus the common ones it parses
and ignores, are declared; anything else is skipped by the parser (see ``config.parse_config``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

PACKAGE = "inference"
_F = descriptor_pb2.FieldDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
}

#: A ``ModelConfig`` message. The class is built at run time, so there are no static stubs.
ConfigMessage = Any

DATA_TYPES = [
    "TYPE_INVALID",
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
]


def _field(
    name: str, number: int, kind: str, *, repeated: bool = False, oneof: int | None = None
) -> FieldProto:
    """A field; ``kind`` is a scalar name, ``msg:Type`` or ``enum:Type`` (package-relative)."""
    proto = _F(name=name, number=number, json_name=name)
    proto.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind.startswith(("msg:", "enum:")):
        prefix, type_name = kind.split(":", 1)
        proto.type = _F.TYPE_MESSAGE if prefix == "msg" else _F.TYPE_ENUM
        proto.type_name = f".{PACKAGE}.{type_name}"
    else:
        proto.type = _SCALARS[kind]
    if oneof is not None:
        proto.oneof_index = oneof
    return proto


def _enum(name: str, values: list[str]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for number, value in enumerate(values):
        enum.value.add(name=value, number=number)
    return enum


def _message(
    name: str,
    fields: list[FieldProto],
    *,
    nested: Sequence[descriptor_pb2.DescriptorProto] = (),
    enums: Sequence[descriptor_pb2.EnumDescriptorProto] = (),
    oneofs: Sequence[str] = (),
) -> descriptor_pb2.DescriptorProto:
    proto = descriptor_pb2.DescriptorProto(name=name)
    proto.field.extend(fields)
    proto.nested_type.extend(nested)
    proto.enum_type.extend(enums)
    for oneof in oneofs:
        proto.oneof_decl.add(name=oneof)
    return proto


def _map_entry(name: str, key: str, value: str) -> descriptor_pb2.DescriptorProto:
    """The synthetic entry message protoc generates for ``map<key, value>``."""
    entry = _message(name, [_field("key", 1, key), _field("value", 2, value)])
    entry.options.map_entry = True
    return entry


def _map_field(parent: str, name: str, number: int, entry: str) -> FieldProto:
    return _field(name, number, f"msg:{parent}.{entry}", repeated=True)


def _tensor_messages() -> list[descriptor_pb2.DescriptorProto]:
    reshape = _message("ModelTensorReshape", [_field("shape", 1, "int64", repeated=True)])
    model_input = _message(
        "ModelInput",
        [
            _field("name", 1, "string"),
            _field("data_type", 2, "enum:DataType"),
            _field("format", 3, "enum:ModelInput.Format"),
            _field("dims", 4, "int64", repeated=True),
            _field("reshape", 5, "msg:ModelTensorReshape"),
            _field("is_shape_tensor", 6, "bool"),
            _field("allow_ragged_batch", 7, "bool"),
            _field("optional", 8, "bool"),
            _field("is_non_linear_format_io", 9, "bool"),
        ],
        enums=[_enum("Format", ["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"])],
    )
    model_output = _message(
        "ModelOutput",
        [
            _field("name", 1, "string"),
            _field("data_type", 2, "enum:DataType"),
            _field("dims", 3, "int64", repeated=True),
            _field("reshape", 5, "msg:ModelTensorReshape"),
            _field("label_filename", 4, "string"),
            _field("is_shape_tensor", 6, "bool"),
            _field("is_non_linear_format_io", 7, "bool"),
        ],
    )
    return [reshape, model_input, model_output]


def _policy_messages() -> list[descriptor_pb2.DescriptorProto]:
    version_policy = _message(
        "ModelVersionPolicy",
        [
            _field("latest", 1, "msg:ModelVersionPolicy.Latest", oneof=0),
            _field("all", 2, "msg:ModelVersionPolicy.All", oneof=0),
            _field("specific", 3, "msg:ModelVersionPolicy.Specific", oneof=0),
        ],
        nested=[
            _message("Latest", [_field("num_versions", 1, "uint32")]),
            _message("All", []),
            _message("Specific", [_field("versions", 1, "int64", repeated=True)]),
        ],
        oneofs=["policy_choice"],
    )
    instance_group = _message(
        "ModelInstanceGroup",
        [
            _field("name", 1, "string"),
            _field("kind", 4, "enum:ModelInstanceGroup.Kind"),
            _field("count", 2, "int32"),
            _field("gpus", 3, "int32", repeated=True),
            _field("profile", 5, "string", repeated=True),
            _field("passive", 7, "bool"),
            _field("host_policy", 9, "string"),
        ],
        enums=[_enum("Kind", ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"])],
    )
    dynamic_batching = _message(
        "ModelDynamicBatching",
        [
            _field("preferred_batch_size", 1, "int32", repeated=True),
            _field("max_queue_delay_microseconds", 2, "uint64"),
            _field("preserve_ordering", 3, "bool"),
            _field("priority_levels", 4, "uint64"),
            _field("default_priority_level", 5, "uint64"),
        ],
    )
    accelerator = _message(
        "Accelerator",
        [
            _field("name", 1, "string"),
            _map_field(
                "ModelOptimizationPolicy.ExecutionAccelerators.Accelerator",
                "parameters",
                2,
                "ParametersEntry",
            ),
        ],
        nested=[_map_entry("ParametersEntry", "string", "string")],
    )
    accelerators_type = "msg:ModelOptimizationPolicy.ExecutionAccelerators.Accelerator"
    optimization = _message(
        "ModelOptimizationPolicy",
        [
            _field("graph", 1, "msg:ModelOptimizationPolicy.Graph"),
            _field("priority", 2, "enum:ModelOptimizationPolicy.ModelPriority"),
            _field(
                "execution_accelerators", 4, "msg:ModelOptimizationPolicy.ExecutionAccelerators"
            ),
            _field("input_pinned_memory", 5, "msg:ModelOptimizationPolicy.PinnedMemoryBuffer"),
            _field("output_pinned_memory", 6, "msg:ModelOptimizationPolicy.PinnedMemoryBuffer"),
            _field("gather_kernel_buffer_threshold", 7, "uint32"),
            _field("eager_batching", 8, "bool"),
        ],
        nested=[
            _message("Graph", [_field("level", 1, "int32")]),
            _message(
                "ExecutionAccelerators",
                [
                    _field("gpu_execution_accelerator", 1, accelerators_type, repeated=True),
                    _field("cpu_execution_accelerator", 2, accelerators_type, repeated=True),
                ],
                nested=[accelerator],
            ),
            _message("PinnedMemoryBuffer", [_field("enable", 1, "bool")]),
        ],
        enums=[_enum("ModelPriority", ["PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN"])],
    )
    return [version_policy, instance_group, dynamic_batching, optimization]


def _model_config_message() -> descriptor_pb2.DescriptorProto:
    return _message(
        "ModelConfig",
        [
            _field("name", 1, "string"),
            _field("platform", 2, "string"),
            _field("backend", 17, "string"),
            _field("runtime", 25, "string"),
            _field("version_policy", 3, "msg:ModelVersionPolicy"),
            _field("max_batch_size", 4, "int32"),
            _field("input", 5, "msg:ModelInput", repeated=True),
            _field("output", 6, "msg:ModelOutput", repeated=True),
            _field("optimization", 12, "msg:ModelOptimizationPolicy"),
            _field("dynamic_batching", 11, "msg:ModelDynamicBatching", oneof=0),
            _field("instance_group", 7, "msg:ModelInstanceGroup", repeated=True),
            _field("default_model_filename", 8, "string"),
            _map_field("ModelConfig", "cc_model_filenames", 9, "CcModelFilenamesEntry"),
            _map_field("ModelConfig", "metric_tags", 10, "MetricTagsEntry"),
            _map_field("ModelConfig", "parameters", 14, "ParametersEntry"),
            _field("model_transaction_policy", 19, "msg:ModelTransactionPolicy"),
            _field("response_cache", 24, "msg:ModelResponseCache"),
        ],
        nested=[
            _map_entry("CcModelFilenamesEntry", "string", "string"),
            _map_entry("MetricTagsEntry", "string", "string"),
            _map_entry("ParametersEntry", "string", "msg:ModelParameter"),
        ],
        oneofs=["scheduling_choice"],
    )


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="cachefleet/triton_model_config.proto", package=PACKAGE, syntax="proto3"
    )
    proto.enum_type.append(_enum("DataType", DATA_TYPES))
    proto.message_type.extend(_tensor_messages())
    proto.message_type.extend(_policy_messages())
    proto.message_type.extend(
        [
            _message("ModelParameter", [_field("string_value", 1, "string")]),
            _message("ModelTransactionPolicy", [_field("decoupled", 1, "bool")]),
            _message("ModelResponseCache", [_field("enable", 1, "bool")]),
            _model_config_message(),
        ]
    )
    return proto


@functools.cache
def model_config_class() -> type[message.Message]:
    """The ``inference.ModelConfig`` message class, built once on first use.

    A private descriptor pool keeps it from clashing with a real Triton proto in the same process.
    """
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    descriptor = pool.FindMessageTypeByName(f"{PACKAGE}.ModelConfig")
    return message_factory.GetMessageClass(descriptor)


def new_model_config(**fields: Any) -> ConfigMessage:
    """An empty (or partly filled) ``ModelConfig`` message."""
    return model_config_class()(**fields)
