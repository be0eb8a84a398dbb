"""Triton's statistics extension: per model version counts and cumulative nanoseconds.

Transport-neutral: the HTTP route and the gRPC ``ModelStatistics`` call both ask
:meth:`StatisticsRegistry.report` and get one document in the shape of Triton's
``ModelStatisticsResponse`` (proto field names, counts and nanoseconds as integers), which HTTP
sends as JSON and gRPC turns into the message with ``json_format.ParseDict``.

What is counted, as Triton counts it (its ``infer_stats.cc``; perf_analyzer reads every field
below, and picks the model version to report by the growth of ``queue.count``):

- ``success`` / ``fail``: every request, however it was answered (cache hit, miss, bypass or an
  identical request already in flight), with its whole duration in the service.
- ``queue``: every successful request, cache hits included (Triton looks its cache up after a
  request is queued), so ``queue.count`` equals ``success.count``; the nanoseconds are the
  requests' waits for a model execution (a hit, or a follower of an identical request in flight,
  waits for none and adds 0).
- ``compute_input``, ``compute_infer``, ``compute_output``: per request that a model execution
  answered, each with that execution's durations (decoding the request into tensors, running the
  model, encoding the response): a batch of three requests adds three, as in Triton, so the three
  counts stay equal, as perf_analyzer requires. A cache hit executes nothing and adds none.
- ``cache_hit``: requests answered from the cache, with the lookup's duration.
- ``cache_miss``: requests that looked the cache up and missed, with the lookup and insert time
  (the request's cache time minus the model's run).
- ``inference_count`` (rows inferred) and ``execution_count`` (model executions): cache hits
  excluded, as in Triton. ``batch_stats`` groups executions (not requests) by their batch size;
  a batcher that merges requests records one execution of N rows with
  :meth:`ModelStatistics.record_execution`.

Requests are written down by the request ledger, from the event loop or a gRPC thread, under
its lock; model executions and reports run on the loop. Nothing here takes a lock of its own:
the fields a request and an execution write are apart (``queue.count`` is the request's,
``queue.ns`` the execution's), and the registry's dict is changed only by atomic dict calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.errors import ModelNotFoundError


@dataclass(slots=True)
class Duration:
    """A count and the nanoseconds spent, Triton's ``StatisticDuration``."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def document(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(frozen=True, slots=True)
class ExecutionTimes:
    """The nanoseconds one model execution spent in each phase."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


@dataclass(slots=True)
class _BatchDurations:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStatistics:
    """The statistics of one model version since it was loaded."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, _BatchDurations] = field(default_factory=dict)
    #: Set when the registry drops them (an unload or reload): whoever bound them binds anew.
    retired: bool = False

    def record_success(self, duration_ns: int) -> None:
        """One request answered (hit, miss or bypass); ``duration_ns``: its time in the server."""
        success = self.success
        success.count += 1
        success.ns += duration_ns
        self.queue.count += 1  # its wait, if any, was added by record_execution
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, duration_ns: int) -> None:
        """One request refused or failed; ``duration_ns``: its time in the server."""
        self.fail.add(duration_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache_hit(self, lookup_ns: int) -> None:
        self.cache_hit.add(lookup_ns)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        self.cache_miss.add(max(0, lookup_and_insert_ns))

    def record_execution(self, batch_size: int, times: ExecutionTimes, requests: int = 1) -> None:
        """One model execution of ``batch_size`` rows (1 for a model without batching) that
        answered ``requests`` requests, each of which waited ``times.queue_ns`` and is counted
        in ``queue`` when it succeeds (:meth:`record_success`)."""
        self.execution_count += 1
        self.inference_count += batch_size
        self.queue.ns += times.queue_ns * requests
        for phase, ns in (
            (self.compute_input, times.compute_input_ns),
            (self.compute_infer, times.compute_infer_ns),
            (self.compute_output, times.compute_output_ns),
        ):
            phase.count += requests
            phase.ns += ns * requests
        batch = self.batches.setdefault(batch_size, _BatchDurations())
        batch.compute_input.add(times.compute_input_ns)
        batch.compute_infer.add(times.compute_infer_ns)
        batch.compute_output.add(times.compute_output_ns)

    def document(self) -> dict[str, Any]:
        """Triton's ``ModelStatistics`` as a JSON-ready dict (proto field names)."""
        phases = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
        inference_stats = {name: getattr(self, name).document() for name in phases}
        inference_stats["cache_hit"] = self.cache_hit.document()
        inference_stats["cache_miss"] = self.cache_miss.document()
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": inference_stats,
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": batch.compute_input.document(),
                    "compute_infer": batch.compute_infer.document(),
                    "compute_output": batch.compute_output.document(),
                }
                for size, batch in sorted(self.batches.items())
            ],
            "memory_usage": [],
            "response_stats": {},
        }


class StatisticsRegistry:
    """Statistics for every loaded model version, kept by the inference service.

    A version's statistics start when it is first served and are dropped when it is unloaded
    (:meth:`forget`), so a reloaded model starts from zero, as in Triton. With an admission
    policy, each version's document also says, per cache tier, whether the tier is used and the
    figures that decided it (``cache_admission``, a field Triton's clients ignore), and a
    reloaded model is measured afresh.
    """

    def __init__(self, admission: AdmissionPolicy | None = None) -> None:
        self._models: dict[tuple[str, str], ModelStatistics] = {}
        self._admission = admission

    def for_version(self, name: str, version: str) -> ModelStatistics:
        """The statistics object of one model version, made on first use."""
        key = (name, version)
        stats = self._models.get(key)
        if stats is None:  # setdefault: a thread and the loop may make it at once
            stats = self._models.setdefault(key, ModelStatistics(name, version))
        return stats

    def forget(self, name: str) -> None:
        """Drop every version of ``name`` (it was unloaded)."""
        for key in [key for key in list(self._models) if key[0] == name]:
            dropped = self._models.pop(key, None)
            if dropped is not None:
                dropped.retired = True
        if self._admission is not None:
            self._admission.forget(name)

    def report(
        self, loaded: list[tuple[str, str]], name: str | None = None, version: str | None = None
    ) -> dict[str, Any]:
        """Triton's ``ModelStatisticsResponse`` for ``loaded`` (name, version) pairs, filtered.

        ``name`` None: every loaded version; ``version`` None: every loaded version of ``name``.
        Raises ModelNotFoundError when the filter matches no loaded version.
        """
        chosen = [
            (model, ver)
            for model, ver in loaded
            if (name is None or model == name) and (version is None or ver == version)
        ]
        if name is not None and not chosen:
            what = f"model '{name}'" if version is None else f"model '{name}' version {version}"
            raise ModelNotFoundError(f"requested statistics of {what}, which is not loaded")
        return {"model_stats": [self._document(*key) for key in sorted(chosen)]}

    def _document(self, name: str, version: str) -> dict[str, Any]:
        document = self.for_version(name, version).document()
        if self._admission is not None:
            figures = self._admission.figures(name, version)
            document["cache_admission"] = [each.document() for each in figures]
        return document
