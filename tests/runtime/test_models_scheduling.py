"""Reading dynamic_batching, instance_group and the row cache switch from a model's config."""

from __future__ import annotations

from typing import Any

import pytest

from cachefleet.runtime.models.config import parse_config, to_model_config
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.scheduling import BatchingPolicy, QueuePolicy, scheduling_policy

BASE = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def policy(extra: str, base: str = BASE) -> Any:
    return scheduling_policy(to_model_config(parse_config(base + extra, source="m")))


def test_defaults_one_instance_no_batching_no_row_cache() -> None:
    assert policy("").instances == 1
    assert policy("").batching is None
    assert policy("").row_cache is False


def test_dynamic_batching_with_tritons_fields() -> None:
    read = policy(
        "dynamic_batching { preferred_batch_size: [ 4, 2 ] max_queue_delay_microseconds: 1500"
        " preserve_ordering: true priority_levels: 3 default_priority_level: 2 }"
    )
    assert read.batching == BatchingPolicy(
        max_batch_size=8,
        preferred_batch_sizes=(2, 4),
        max_queue_delay_s=0.0015,
        preserve_ordering=True,
        priority_levels=3,
        default_priority_level=2,
    )
    assert read.batching.target_batch_size == 4
    assert policy("dynamic_batching { }").batching == BatchingPolicy(max_batch_size=8)


def test_no_batching_without_a_batch_dimension() -> None:
    base = BASE.replace("max_batch_size: 8", "max_batch_size: 0")
    read = policy(
        "dynamic_batching { }"
        ' parameters { key: "cachefleet.row_cache" value { string_value: "true" } }',
        base,
    )
    assert (read.batching, read.row_cache) == (None, False)


def test_instances_add_up_over_groups() -> None:
    assert (
        policy("instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_CPU } ]").instances == 3
    )
    assert policy("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]").instances == 4


@pytest.mark.parametrize(("text", "on"), [("true", True), ("TRUE", True), ("false", False)])
def test_row_cache_parameter(text: str, on: bool) -> None:
    extra = f'parameters {{ key: "cachefleet.row_cache" value {{ string_value: "{text}" }} }}'
    assert policy(extra).row_cache is on


@pytest.mark.parametrize(
    "extra",
    [
        "dynamic_batching { preferred_batch_size: [ 16 ] }",
        "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        'parameters { key: "cachefleet.row_cache" value { string_value: "maybe" } }',
    ],
)
def test_bad_values_refuse_the_model(extra: str) -> None:
    with pytest.raises(ModelLoadError):
        policy(extra)


def test_queue_policies_are_read() -> None:
    read = policy(
        "dynamic_batching { priority_levels: 2 default_priority_level: 1"
        " default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1500"
        " allow_timeout_override: true max_queue_size: 3 }"
        " priority_queue_policy { key: 2 value: { max_queue_size: 1 } } }"
    )
    assert read.batching is not None
    assert read.batching.queue_policy(1) == QueuePolicy(
        max_queue_size=3, default_timeout_s=0.0015, allow_timeout_override=True,
        delay_on_timeout=True,
    )  # fmt: skip
    assert read.batching.queue_policy(2) == QueuePolicy(max_queue_size=1)
    assert read.batching.queue_policy(1).timeout_s(2_000_000) == 2.0
    assert read.batching.queue_policy(2).timeout_s(2_000_000) == 0.0
