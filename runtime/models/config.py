"""``config.pbtxt``: parse Triton's text format, fill Triton's defaults, turn it into ModelConfig.

Triton configs in the wild carry fields this server does not act on (sequence batching, warmup,
...). They must still load, so every field that is read but not acted on is logged once per
model, so that nobody believes it took effect. A field Triton's own schema does not know is an
error, as in Triton.
"""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf import descriptor, json_format, text_format

from cachefleet.runtime.config import QuantityError, parse_duration_s
from cachefleet.runtime.models.config_message import ConfigMessage, new_model_config
from cachefleet.runtime.models.datatypes import CONFIG_TO_KSERVE
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.types import ModelConfig, TensorSpec

logger = logging.getLogger(__name__)

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"
DEFAULT_MODEL_FILENAME = "model.onnx"
TTL_PARAMETER = "cache_ttl"
#: Top-level fields that change what the server does; the rest are parsed and reported ignored.
ACTED_ON = frozenset(
    {
        "name",
        "platform",
        "backend",
        "version_policy",
        "max_batch_size",
        "input",
        "output",
        "optimization",
        "default_model_filename",
        "parameters",
        "response_cache",
        "instance_group",  # its kind (all KIND_CPU keeps the model on the CPU) and count
        "dynamic_batching",
    }
)


def parse_config(text: str, *, source: str) -> ConfigMessage:
    """Parse config.pbtxt text into Triton's own ModelConfig message.

    A field Triton's schema does not know is an error naming the field, as in Triton: skipping
    it would let a misspelt ``response_cache`` or ``dynamic_batching`` silently not happen.
    """
    config = new_model_config()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise ModelLoadError(f"{source}: {error}") from None
    return config


def complete_config(config: ConfigMessage, folder: str) -> None:
    """Check the name and platform and fill Triton's defaults in place, as Triton does."""
    name = getattr(config, "name", "")
    if name and name != folder:
        raise ModelLoadError(f"config name {name!r} does not match its folder {folder!r}")
    config.name = folder
    platform, backend = config.platform, config.backend
    if platform not in ("", PLATFORM) or backend not in ("", BACKEND):
        wanted = f"platform {platform!r}" if platform else f"backend {backend!r}"
        raise ModelLoadError(
            f'model {folder!r}: {wanted} is not served here; use platform: "{PLATFORM}" '
            f'or backend: "{BACKEND}"'
        )
    config.platform, config.backend = PLATFORM, BACKEND
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if not config.default_model_filename:
        config.default_model_filename = DEFAULT_MODEL_FILENAME
    if config.max_batch_size < 0:
        raise ModelLoadError(f"model {folder!r}: max_batch_size cannot be negative")


def log_ignored_fields(config: ConfigMessage) -> None:
    ignored = sorted(field.name for field, _ in config.ListFields() if field.name not in ACTED_ON)
    if ignored:
        logger.info(
            "model %r: config fields parsed but not acted on: %s",
            config.name,
            ", ".join(ignored),
        )


def config_document(config: ConfigMessage) -> dict[str, Any]:
    """The config as Triton's ``GET /v2/models/{m}/config`` returns it: JSON, proto names,
    every field present, 64-bit integers as numbers.

    protobuf's JSON mapping writes 64-bit integers as strings; Triton writes numbers (``dims``,
    ``versions``). protobuf 7 can do that itself, protobuf 6 (what tritonclient pins) cannot, so
    the strings are turned back into numbers here, guided by the message's descriptor.
    """
    document = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    _unquote_int64(config.DESCRIPTOR, document)
    return document


_INT64_TYPES = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)


def _unquote_int64(message_type: descriptor.Descriptor, document: dict[str, Any]) -> None:
    """Turn the 64-bit integers of a ``MessageToDict`` document into numbers, in place."""
    for field in message_type.fields:
        if field.name not in document:
            continue
        value = document[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value_field = entry.fields_by_name["value"]
            for key, item in value.items():
                value[key] = _unquote_value(value_field, item)
        elif isinstance(value, list):
            document[field.name] = [_unquote_value(field, item) for item in value]
        else:
            document[field.name] = _unquote_value(field, value)


def _unquote_value(field: descriptor.FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and isinstance(value, dict):
        _unquote_int64(field.message_type, value)
        return value
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value


def to_model_config(config: ConfigMessage) -> ModelConfig:
    """The parts the server acts on, checked; the whole config goes along as ``document``."""
    name: str = config.name
    inputs = tuple(_tensor_spec(name, "input", item) for item in config.input)
    outputs = tuple(_tensor_spec(name, "output", item) for item in config.output)
    for kind, specs in (("input", inputs), ("output", outputs)):
        names = [spec.name for spec in specs]
        duplicates = sorted({each for each in names if names.count(each) > 1})
        if duplicates:
            raise ModelLoadError(f"model {name!r}: {kind} names used twice: {duplicates}")
    return ModelConfig(
        name=name,
        platform=config.platform,
        backend=config.backend,
        max_batch_size=config.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        response_cache=bool(config.response_cache.enable),
        cache_ttl_s=_cache_ttl_s(config),
        document=config_document(config),
    )


def _tensor_spec(model: str, kind: str, item: Any) -> TensorSpec:
    if not item.name:
        raise ModelLoadError(f"model {model!r}: an {kind} has no name")
    type_name = _enum_name(item, "data_type")
    datatype = CONFIG_TO_KSERVE.get(type_name)
    if datatype is None:
        raise ModelLoadError(f"model {model!r}: {kind} {item.name!r} has unsupported {type_name}")
    dims = tuple(int(dim) for dim in item.dims)
    if any(dim < -1 or dim == 0 for dim in dims):
        raise ModelLoadError(f"model {model!r}: {kind} {item.name!r} has invalid dims {dims}")
    reshape = tuple(int(dim) for dim in item.reshape.shape) if item.HasField("reshape") else None
    return TensorSpec(
        name=item.name,
        datatype=datatype,
        dims=dims,
        label_filename=(item.label_filename or None) if kind == "output" else None,
        reshape=reshape,
        optional=bool(item.optional) if kind == "input" else False,
    )


def _enum_name(item: Any, field: str) -> str:
    descriptor = item.DESCRIPTOR.fields_by_name[field].enum_type
    value = getattr(item, field)
    entry = descriptor.values_by_number.get(value)
    return entry.name if entry is not None else str(value)


def _cache_ttl_s(config: Any) -> float | None:
    if TTL_PARAMETER not in config.parameters:
        return None
    text = config.parameters[TTL_PARAMETER].string_value
    try:
        return parse_duration_s(text)
    except QuantityError as error:
        raise ModelLoadError(f"model {config.name!r}: parameter {TTL_PARAMETER}: {error}") from None
