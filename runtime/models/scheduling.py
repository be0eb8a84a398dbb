"""How a model wants its executions scheduled, read from its config document in one place.

``dynamic_batching``, ``instance_group`` and the ``cachefleet.row_cache`` parameter are read
from the config's JSON form (Triton's ``GET /v2/models/{m}/config`` shape), not from the parsed
protobuf: that form is Triton's own and stays the same whichever protobuf classes parse
``config.pbtxt``, so this is the only module that knows where these fields live.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.types import ModelConfig

logger = logging.getLogger(__name__)
#: ``parameters { key: "cachefleet.row_cache" value: { string_value: "true" } }`` turns it on.
ROW_CACHE_PARAMETER = "cachefleet.row_cache"
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy`` for one priority level of the dynamic batcher's queue."""

    #: Over it, a new request is refused (Triton: UNAVAILABLE "Exceeds maximum queue size");
    #: 0: no bound (the server's --max-requests-in-flight still holds).
    max_queue_size: int = 0
    #: How long a request may wait in the queue; 0: as long as it takes.
    default_timeout_s: float = 0.0
    #: Whether a request's own ``timeout`` parameter (microseconds) replaces the default.
    allow_timeout_override: bool = False
    #: What a request whose time is up gets: refused (REJECT, "Request timeout expired"), or
    #: moved behind every request still in time (DELAY).
    delay_on_timeout: bool = False

    def timeout_s(self, requested_us: int) -> float:
        """The queue timeout of a request that asked for ``requested_us`` (0: none asked)."""
        if self.allow_timeout_override and requested_us:
            return requested_us / 1e6
        return self.default_timeout_s


@dataclass(frozen=True, slots=True)
class BatchingPolicy:
    """Triton's ``dynamic_batching`` block, with Triton's defaults filled in."""

    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_s: float = 0.0
    preserve_ordering: bool = False
    #: 0: one queue. Otherwise levels 1 (first served) to ``priority_levels``.
    priority_levels: int = 0
    #: The level of a request that names no priority (or priority 0).
    default_priority_level: int = 0
    #: ``default_queue_policy``, and ``priority_queue_policy`` by level where one is given.
    default_queue_policy: QueuePolicy = QueuePolicy()
    queue_policies: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def queue_policy(self, level: int) -> QueuePolicy:
        return self.queue_policies.get(level, self.default_queue_policy)

    @property
    def target_batch_size(self) -> int:
        """The size at which a batch goes at once, without waiting for the queue delay."""
        return max(self.preferred_batch_sizes, default=self.max_batch_size)


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """Everything the scheduler and the row cache need to know about one model."""

    #: Concurrent executions of the model: its ``instance_group`` counts, times the GPUs each
    #: group lists, summed (at least 1).
    instances: int = 1
    #: None: every request runs by itself.
    batching: BatchingPolicy | None = None
    #: Rows of a batched request are independent, so each row may be cached on its own.
    row_cache: bool = False


def scheduling_policy(config: ModelConfig) -> SchedulingPolicy:
    """The policy of ``config``; raises ModelLoadError for values Triton would refuse too."""
    document = config.document
    return SchedulingPolicy(
        instances=_instances(document),
        batching=_batching(config),
        row_cache=config.max_batch_size > 0 and _row_cache(config),
    )


def _instances(document: Mapping[str, Any]) -> int:
    groups = document.get("instance_group") or []
    # Triton: a group without a count has one instance, on each of the GPUs it lists.
    return max(
        1,
        sum(
            max(1, int(group.get("count") or 0)) * max(1, len(group.get("gpus") or ()))
            for group in groups
        ),
    )


def _batching(config: ModelConfig) -> BatchingPolicy | None:
    block = config.document.get("dynamic_batching")
    if block is None or config.max_batch_size <= 0:
        return None
    preferred = tuple(sorted({int(size) for size in block.get("preferred_batch_size") or ()}))
    bad = [size for size in preferred if not 0 < size <= config.max_batch_size]
    if bad:
        raise ModelLoadError(
            f"model {config.name!r}: preferred_batch_size {bad} must be between 1 and "
            f"max_batch_size {config.max_batch_size}"
        )
    default_queue = _queue_policy(block.get("default_queue_policy") or {})
    by_level = {
        int(level): _queue_policy(entry)
        for level, entry in (block.get("priority_queue_policy") or {}).items()
    }
    levels = int(block.get("priority_levels") or 0)
    default_level = int(block.get("default_priority_level") or 0)
    if levels and not 1 <= default_level <= levels:
        raise ModelLoadError(
            f"model {config.name!r}: default_priority_level must be between 1 and "
            f"priority_levels ({levels}), not {default_level}"
        )
    return BatchingPolicy(
        max_batch_size=config.max_batch_size,
        preferred_batch_sizes=preferred,
        max_queue_delay_s=int(block.get("max_queue_delay_microseconds") or 0) / 1e6,
        preserve_ordering=bool(block.get("preserve_ordering")),
        priority_levels=levels,
        default_priority_level=default_level,
        default_queue_policy=default_queue,
        queue_policies=by_level,
    )


def _queue_policy(entry: Mapping[str, Any]) -> QueuePolicy:
    """A ``ModelQueuePolicy`` in its JSON form (64-bit numbers may come as strings)."""
    return QueuePolicy(
        max_queue_size=int(entry.get("max_queue_size") or 0),
        default_timeout_s=int(entry.get("default_timeout_microseconds") or 0) / 1e6,
        allow_timeout_override=bool(entry.get("allow_timeout_override")),
        delay_on_timeout=entry.get("timeout_action") == "DELAY",
    )


def _row_cache(config: ModelConfig) -> bool:
    entry = config.document.get("parameters", {}).get(ROW_CACHE_PARAMETER)
    if entry is None:
        return False
    text = str(entry.get("string_value", "")).strip().lower()
    if text not in _TRUE | _FALSE:
        raise ModelLoadError(
            f"model {config.name!r}: parameter {ROW_CACHE_PARAMETER} must be true or false, "
            f"not {text!r}"
        )
    return text in _TRUE
