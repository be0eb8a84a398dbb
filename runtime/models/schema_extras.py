"""The parts of Triton's ModelConfig this server parses but does not act on.

They are declared in full because protobuf's text parser can skip an unknown field only in
some spellings: an unknown list of messages written ``field [ { ... } ]`` (Triton's usual style)
is a parse error. Declaring every Triton field keeps real Triton configs loading.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from cachefleet.runtime.models import schema_builder as b

Messages = list[descriptor_pb2.DescriptorProto]


def batching_messages() -> Messages:
    """Instance groups, batch inputs/outputs, dynamic batching and its queue policy."""
    rate_limiter = b.message(
        "ModelRateLimiter",
        [
            b.field("resources", 1, "msg:ModelRateLimiter.Resource", repeated=True),
            b.field("priority", 2, "uint32"),
        ],
        nested=[
            b.message(
                "Resource",
                [
                    b.field("name", 1, "string"),
                    b.field("global", 2, "bool"),
                    b.field("count", 3, "uint32"),
                ],
            )
        ],
    )
    secondary = b.message(
        "SecondaryDevice",
        [
            b.field("kind", 1, "enum:ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind"),
            b.field("device_id", 2, "int64"),
        ],
        enums=[b.enum("SecondaryDeviceKind", ["KIND_NVDLA"])],
    )
    instance_group = b.message(
        "ModelInstanceGroup",
        [
            b.field("name", 1, "string"),
            b.field("kind", 4, "enum:ModelInstanceGroup.Kind"),
            b.field("count", 2, "int32"),
            b.field("rate_limiter", 6, "msg:ModelRateLimiter"),
            b.field("gpus", 3, "int32", repeated=True),
            b.field(
                "secondary_devices", 8, "msg:ModelInstanceGroup.SecondaryDevice", repeated=True
            ),
            b.field("profile", 5, "string", repeated=True),
            b.field("passive", 7, "bool"),
            b.field("host_policy", 9, "string"),
        ],
        nested=[secondary],
        enums=[b.enum("Kind", ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"])],
    )
    batch_input = b.message(
        "BatchInput",
        [
            b.field("kind", 1, "enum:BatchInput.Kind"),
            b.field("target_name", 2, "string", repeated=True),
            b.field("data_type", 3, "enum:DataType"),
            b.field("source_input", 4, "string", repeated=True),
        ],
        enums=[
            b.enum(
                "Kind",
                [
                    "BATCH_ELEMENT_COUNT",
                    "BATCH_ACCUMULATED_ELEMENT_COUNT",
                    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
                    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
                    "BATCH_ITEM_SHAPE",
                    "BATCH_ITEM_SHAPE_FLATTEN",
                ],
            )
        ],
    )
    batch_output = b.message(
        "BatchOutput",
        [
            b.field("target_name", 1, "string", repeated=True),
            b.field("kind", 2, "enum:BatchOutput.Kind"),
            b.field("source_input", 3, "string", repeated=True),
        ],
        enums=[b.enum("Kind", ["BATCH_SCATTER_WITH_INPUT_SHAPE"])],
    )
    queue_policy = b.message(
        "ModelQueuePolicy",
        [
            b.field("timeout_action", 1, "enum:ModelQueuePolicy.TimeoutAction"),
            b.field("default_timeout_microseconds", 2, "uint64"),
            b.field("allow_timeout_override", 3, "bool"),
            b.field("max_queue_size", 4, "uint32"),
        ],
        enums=[b.enum("TimeoutAction", ["REJECT", "DELAY"])],
    )
    dynamic_batching = b.message(
        "ModelDynamicBatching",
        [
            b.field("preferred_batch_size", 1, "int32", repeated=True),
            b.field("max_queue_delay_microseconds", 2, "uint64"),
            b.field("preserve_ordering", 3, "bool"),
            b.field("priority_levels", 4, "uint64"),
            b.field("default_priority_level", 5, "uint64"),
            b.field("default_queue_policy", 6, "msg:ModelQueuePolicy"),
            b.map_field("ModelDynamicBatching", "priority_queue_policy", 7, "PriorityEntry"),
        ],
        nested=[b.map_entry("PriorityEntry", "uint64", "msg:ModelQueuePolicy")],
    )
    return [rate_limiter, instance_group, batch_input, batch_output, queue_policy, dynamic_batching]


def sequence_batching_message() -> descriptor_pb2.DescriptorProto:
    scope = "ModelSequenceBatching"
    control = b.message(
        "Control",
        [
            b.field("kind", 1, f"enum:{scope}.Control.Kind"),
            b.field("int32_false_true", 2, "int32", repeated=True),
            b.field("fp32_false_true", 3, "float", repeated=True),
            b.field("bool_false_true", 5, "bool", repeated=True),
            b.field("data_type", 4, "enum:DataType"),
        ],
        enums=[
            b.enum(
                "Kind",
                [
                    "CONTROL_SEQUENCE_START",
                    "CONTROL_SEQUENCE_READY",
                    "CONTROL_SEQUENCE_END",
                    "CONTROL_SEQUENCE_CORRID",
                ],
            )
        ],
    )
    control_input = b.message(
        "ControlInput",
        [
            b.field("name", 1, "string"),
            b.field("control", 2, f"msg:{scope}.Control", repeated=True),
        ],
    )
    initial_state = b.message(
        "InitialState",
        [
            b.field("data_type", 1, "enum:DataType"),
            b.field("dims", 2, "int64", repeated=True),
            b.field("zero_data", 3, "bool", oneof=0),
            b.field("data_file", 4, "string", oneof=0),
            b.field("name", 5, "string"),
        ],
        oneofs=["state_data"],
    )
    state = b.message(
        "State",
        [
            b.field("input_name", 1, "string"),
            b.field("output_name", 2, "string"),
            b.field("data_type", 3, "enum:DataType"),
            b.field("dims", 4, "int64", repeated=True),
            b.field("initial_state", 5, f"msg:{scope}.InitialState", repeated=True),
            b.field("use_same_buffer_for_input_output", 6, "bool"),
            b.field("use_growable_memory", 7, "bool"),
        ],
    )
    direct = b.message(
        "StrategyDirect",
        [
            b.field("max_queue_delay_microseconds", 1, "uint64"),
            b.field("minimum_slot_utilization", 2, "float"),
        ],
    )
    oldest = b.message(
        "StrategyOldest",
        [
            b.field("max_candidate_sequences", 1, "int32"),
            b.field("preferred_batch_size", 2, "int32", repeated=True),
            b.field("max_queue_delay_microseconds", 3, "uint64"),
            b.field("preserve_ordering", 4, "bool"),
        ],
    )
    return b.message(
        scope,
        [
            b.field("direct", 3, f"msg:{scope}.StrategyDirect", oneof=0),
            b.field("oldest", 4, f"msg:{scope}.StrategyOldest", oneof=0),
            b.field("max_sequence_idle_microseconds", 1, "uint64"),
            b.field("control_input", 2, f"msg:{scope}.ControlInput", repeated=True),
            b.field("state", 5, f"msg:{scope}.State", repeated=True),
            b.field("iterative_sequence", 6, "bool"),
        ],
        nested=[control, control_input, initial_state, state, direct, oldest],
        oneofs=["strategy_choice"],
    )


def ensemble_message() -> descriptor_pb2.DescriptorProto:
    step = b.message(
        "Step",
        [
            b.field("model_name", 1, "string"),
            b.field("model_version", 2, "int64"),
            b.map_field("ModelEnsembling.Step", "input_map", 3, "InputMapEntry"),
            b.map_field("ModelEnsembling.Step", "output_map", 4, "OutputMapEntry"),
            b.field("model_namespace", 5, "string"),
        ],
        nested=[
            b.map_entry("InputMapEntry", "string", "string"),
            b.map_entry("OutputMapEntry", "string", "string"),
        ],
    )
    return b.message(
        "ModelEnsembling",
        [
            b.field("step", 1, "msg:ModelEnsembling.Step", repeated=True),
            b.field("max_inflight_requests", 2, "uint32"),
        ],
        nested=[step],
    )


def lifecycle_messages() -> Messages:
    """Warmup, custom operations, repository agents and metric controls."""
    warmup_input = b.message(
        "Input",
        [
            b.field("data_type", 1, "enum:DataType"),
            b.field("dims", 2, "int64", repeated=True),
            b.field("zero_data", 3, "bool", oneof=0),
            b.field("random_data", 4, "bool", oneof=0),
            b.field("input_data_file", 5, "string", oneof=0),
        ],
        oneofs=["input_data_type"],
    )
    warmup = b.message(
        "ModelWarmup",
        [
            b.field("name", 1, "string"),
            b.field("batch_size", 2, "uint32"),
            b.map_field("ModelWarmup", "inputs", 3, "InputsEntry"),
            b.field("count", 4, "uint32"),
        ],
        nested=[warmup_input, b.map_entry("InputsEntry", "string", "msg:ModelWarmup.Input")],
    )
    operations = b.message(
        "ModelOperations", [b.field("op_library_filename", 1, "string", repeated=True)]
    )
    agent = b.message(
        "Agent",
        [
            b.field("name", 1, "string"),
            b.map_field("ModelRepositoryAgents.Agent", "parameters", 2, "ParametersEntry"),
        ],
        nested=[b.map_entry("ParametersEntry", "string", "string")],
    )
    agents = b.message(
        "ModelRepositoryAgents",
        [b.field("agents", 1, "msg:ModelRepositoryAgents.Agent", repeated=True)],
        nested=[agent],
    )
    return [warmup, operations, agents, _metrics_message()]


def _metrics_message() -> descriptor_pb2.DescriptorProto:
    scope = "ModelMetrics.MetricControl"
    control = b.message(
        "MetricControl",
        [
            b.field("metric_identifier", 1, f"msg:{scope}.MetricIdentifier"),
            b.field("histogram_options", 2, f"msg:{scope}.HistogramOptions", oneof=0),
        ],
        nested=[
            b.message("MetricIdentifier", [b.field("family", 1, "string")]),
            b.message("HistogramOptions", [b.field("buckets", 1, "double", repeated=True)]),
        ],
        oneofs=["metric_options"],
    )
    return b.message(
        "ModelMetrics",
        [b.field("metric_control", 1, f"msg:{scope}", repeated=True)],
        nested=[control],
    )


def cuda_message() -> descriptor_pb2.DescriptorProto:
    """``ModelOptimizationPolicy.Cuda``: CUDA graph settings."""
    scope = "ModelOptimizationPolicy.Cuda.GraphSpec"
    shape = b.message("Shape", [b.field("dim", 1, "int64", repeated=True)])
    lower_bound = b.message(
        "LowerBound",
        [
            b.field("batch_size", 1, "int32"),
            b.map_field(f"{scope}.LowerBound", "input", 2, "InputEntry"),
        ],
        nested=[b.map_entry("InputEntry", "string", f"msg:{scope}.Shape")],
    )
    graph_spec = b.message(
        "GraphSpec",
        [
            b.field("batch_size", 1, "int32"),
            b.map_field(scope, "input", 2, "InputEntry"),
            b.field("graph_lower_bound", 3, f"msg:{scope}.LowerBound"),
        ],
        nested=[shape, lower_bound, b.map_entry("InputEntry", "string", f"msg:{scope}.Shape")],
    )
    return b.message(
        "Cuda",
        [
            b.field("graphs", 1, "bool"),
            b.field("busy_wait_events", 2, "bool"),
            b.field("graph_spec", 3, f"msg:{scope}", repeated=True),
            b.field("output_copy_stream", 4, "bool"),
        ],
        nested=[graph_spec],
    )
