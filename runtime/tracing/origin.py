"""Where a traced request came from: its parent trace context and its transport's attributes.

A transport that traces sets :data:`CURRENT` for the time it answers a request (only when
tracing is on: otherwise nothing sets it and nothing reads it). The span is made at the end,
from the request's ledger entry, under this parent, so the transports pass nothing down the
request path: the context variable carries it, as OpenTelemetry's own context does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue


@dataclass(frozen=True, slots=True)
class Origin:
    """One request as its transport saw it."""

    #: The extracted W3C trace context (an empty context: the span starts a trace).
    parent: Context
    #: The span's name: ``POST /v2/models/{model}/infer`` or ``<service>/<method>``.
    name: str
    #: The transport's attributes (HTTP or RPC semantic conventions).
    attributes: Mapping[str, AttributeValue]
    #: The attributes of the answer's status, from its HTTP status code (200 on success).
    status: Callable[[int], Mapping[str, AttributeValue]]


CURRENT: ContextVar[Origin | None] = ContextVar("cachefleet_trace_origin", default=None)
