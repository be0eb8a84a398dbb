"""One server span per answered inference request, made when its ledger entry is written.

The span is started and ended at once, with the request's own start and end times, under the
parent its transport extracted (:mod:`.origin`): nothing is held open while the request runs,
and a request that never reaches the ledger costs nothing here. A failed request's span ends
with status ERROR, its message and ``error.type``; a 4xx is a failure of the request too (the
client's), which OpenTelemetry's HTTP conventions would leave unset: here every answer that is
not a success is one to find.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.origin import CURRENT

_OK = 200


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the ledger knows of one answered request (``perf_counter_ns`` times)."""

    model: str
    version: str
    started_ns: int
    ended_ns: int
    #: The X-Cache value (hit-local, hit-redis, miss, partial, bypass), None when it failed.
    cache_result: str | None = None
    queue_ns: int | None = None
    compute_ns: int | None = None
    error: ServingError | None = None


class RequestSpans:
    """Makes the span of each request the ledger records."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def record(self, facts: RequestFacts) -> None:
        origin = CURRENT.get()
        attributes: dict[str, AttributeValue] = {
            names.MODEL_NAME: facts.model,
            names.MODEL_VERSION: facts.version,
        }
        if origin is not None:
            attributes.update(origin.attributes)
        if facts.cache_result is not None:
            attributes[names.CACHE_RESULT] = facts.cache_result
            tier = names.TIER_OF_RESULT.get(facts.cache_result)
            if tier is not None:
                attributes[names.CACHE_TIER] = tier
        if facts.queue_ns is not None:
            attributes[names.QUEUE_DURATION] = facts.queue_ns / 1e9
        if facts.compute_ns is not None:
            attributes[names.COMPUTE_DURATION] = facts.compute_ns / 1e9
        error = facts.error
        if origin is not None:
            attributes.update(origin.status(_OK if error is None else error.status_code))
        if error is not None:
            attributes[names.ERROR_TYPE] = type(error).__name__
        # perf_counter times to the wall clock the exporter wants, from one reading of both.
        offset = time.time_ns() - time.perf_counter_ns()
        span = self._tracer.start_span(
            origin.name if origin is not None else "infer",
            context=origin.parent if origin is not None else None,
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=facts.started_ns + offset,
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error.message))
        span.end(end_time=facts.ended_ns + offset)
