"""Triton's ``ModelConfig`` protobuf schema, declared in Python (no protoc at build time).

Field names and numbers are Triton's (``model_config.proto``), so text and JSON forms of a
config are exactly Triton's. This module declares what the server acts on; ``schema_extras``
declares the rest of Triton's fields, so that real Triton configs parse. Fields newer than this
schema are skipped by the parser (see ``config.parse_config``).
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from cachefleet.runtime.models import schema_builder as b
from cachefleet.runtime.models import schema_extras as extras
from cachefleet.runtime.models.schema_builder import PACKAGE

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


def _tensor_messages() -> list[descriptor_pb2.DescriptorProto]:
    reshape = b.message("ModelTensorReshape", [b.field("shape", 1, "int64", repeated=True)])
    model_input = b.message(
        "ModelInput",
        [
            b.field("name", 1, "string"),
            b.field("data_type", 2, "enum:DataType"),
            b.field("format", 3, "enum:ModelInput.Format"),
            b.field("dims", 4, "int64", repeated=True),
            b.field("reshape", 5, "msg:ModelTensorReshape"),
            b.field("is_shape_tensor", 6, "bool"),
            b.field("allow_ragged_batch", 7, "bool"),
            b.field("optional", 8, "bool"),
            b.field("is_non_linear_format_io", 9, "bool"),
        ],
        enums=[b.enum("Format", ["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"])],
    )
    model_output = b.message(
        "ModelOutput",
        [
            b.field("name", 1, "string"),
            b.field("data_type", 2, "enum:DataType"),
            b.field("dims", 3, "int64", repeated=True),
            b.field("reshape", 5, "msg:ModelTensorReshape"),
            b.field("label_filename", 4, "string"),
            b.field("is_shape_tensor", 6, "bool"),
            b.field("is_non_linear_format_io", 7, "bool"),
        ],
    )
    return [reshape, model_input, model_output]


def _policy_messages() -> list[descriptor_pb2.DescriptorProto]:
    version_policy = b.message(
        "ModelVersionPolicy",
        [
            b.field("latest", 1, "msg:ModelVersionPolicy.Latest", oneof=0),
            b.field("all", 2, "msg:ModelVersionPolicy.All", oneof=0),
            b.field("specific", 3, "msg:ModelVersionPolicy.Specific", oneof=0),
        ],
        nested=[
            b.message("Latest", [b.field("num_versions", 1, "uint32")]),
            b.message("All", []),
            b.message("Specific", [b.field("versions", 1, "int64", repeated=True)]),
        ],
        oneofs=["policy_choice"],
    )
    accelerator = b.message(
        "Accelerator",
        [
            b.field("name", 1, "string"),
            b.map_field(
                "ModelOptimizationPolicy.ExecutionAccelerators.Accelerator",
                "parameters",
                2,
                "ParametersEntry",
            ),
        ],
        nested=[b.map_entry("ParametersEntry", "string", "string")],
    )
    accelerators_type = "msg:ModelOptimizationPolicy.ExecutionAccelerators.Accelerator"
    optimization = b.message(
        "ModelOptimizationPolicy",
        [
            b.field("graph", 1, "msg:ModelOptimizationPolicy.Graph"),
            b.field("priority", 2, "enum:ModelOptimizationPolicy.ModelPriority"),
            b.field("cuda", 3, "msg:ModelOptimizationPolicy.Cuda"),
            b.field(
                "execution_accelerators", 4, "msg:ModelOptimizationPolicy.ExecutionAccelerators"
            ),
            b.field("input_pinned_memory", 5, "msg:ModelOptimizationPolicy.PinnedMemoryBuffer"),
            b.field("output_pinned_memory", 6, "msg:ModelOptimizationPolicy.PinnedMemoryBuffer"),
            b.field("gather_kernel_buffer_threshold", 7, "uint32"),
            b.field("eager_batching", 8, "bool"),
        ],
        nested=[
            b.message("Graph", [b.field("level", 1, "int32")]),
            b.message(
                "ExecutionAccelerators",
                [
                    b.field("gpu_execution_accelerator", 1, accelerators_type, repeated=True),
                    b.field("cpu_execution_accelerator", 2, accelerators_type, repeated=True),
                ],
                nested=[accelerator],
            ),
            b.message("PinnedMemoryBuffer", [b.field("enable", 1, "bool")]),
            extras.cuda_message(),
        ],
        enums=[b.enum("ModelPriority", ["PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN"])],
    )
    return [version_policy, optimization]


def _model_config_message() -> descriptor_pb2.DescriptorProto:
    return b.message(
        "ModelConfig",
        [
            b.field("name", 1, "string"),
            b.field("platform", 2, "string"),
            b.field("backend", 17, "string"),
            b.field("runtime", 25, "string"),
            b.field("version_policy", 3, "msg:ModelVersionPolicy"),
            b.field("max_batch_size", 4, "int32"),
            b.field("input", 5, "msg:ModelInput", repeated=True),
            b.field("output", 6, "msg:ModelOutput", repeated=True),
            b.field("batch_input", 20, "msg:BatchInput", repeated=True),
            b.field("batch_output", 21, "msg:BatchOutput", repeated=True),
            b.field("optimization", 12, "msg:ModelOptimizationPolicy"),
            b.field("dynamic_batching", 11, "msg:ModelDynamicBatching", oneof=0),
            b.field("sequence_batching", 13, "msg:ModelSequenceBatching", oneof=0),
            b.field("ensemble_scheduling", 15, "msg:ModelEnsembling", oneof=0),
            b.field("instance_group", 7, "msg:ModelInstanceGroup", repeated=True),
            b.field("default_model_filename", 8, "string"),
            b.map_field("ModelConfig", "cc_model_filenames", 9, "CcModelFilenamesEntry"),
            b.map_field("ModelConfig", "metric_tags", 10, "MetricTagsEntry"),
            b.map_field("ModelConfig", "parameters", 14, "ParametersEntry"),
            b.field("model_warmup", 16, "msg:ModelWarmup", repeated=True),
            b.field("model_operations", 18, "msg:ModelOperations"),
            b.field("model_transaction_policy", 19, "msg:ModelTransactionPolicy"),
            b.field("model_repository_agents", 23, "msg:ModelRepositoryAgents"),
            b.field("response_cache", 24, "msg:ModelResponseCache"),
            b.field("model_metrics", 26, "msg:ModelMetrics"),
        ],
        nested=[
            b.map_entry("CcModelFilenamesEntry", "string", "string"),
            b.map_entry("MetricTagsEntry", "string", "string"),
            b.map_entry("ParametersEntry", "string", "msg:ModelParameter"),
        ],
        oneofs=["scheduling_choice"],
    )


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="cachefleet/triton_model_config.proto", package=PACKAGE, syntax="proto3"
    )
    proto.enum_type.append(b.enum("DataType", DATA_TYPES))
    proto.message_type.extend(_tensor_messages())
    proto.message_type.extend(_policy_messages())
    proto.message_type.extend(extras.batching_messages())
    proto.message_type.extend([extras.sequence_batching_message(), extras.ensemble_message()])
    proto.message_type.extend(extras.lifecycle_messages())
    proto.message_type.extend(
        [
            b.message("ModelParameter", [b.field("string_value", 1, "string")]),
            b.message("ModelTransactionPolicy", [b.field("decoupled", 1, "bool")]),
            b.message("ModelResponseCache", [b.field("enable", 1, "bool")]),
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
