"""Whether the runtime traces, from the standard ``OTEL_*`` variables, read once at start-up.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter the runtime has (``otlp``, or
``console`` to see spans on stdout), or, with that variable unset, when an OTLP endpoint is
given (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). Unlike the
SDK's own default (``otlp`` to localhost), nothing set means off: a server nobody asked to trace
must not build spans for a collector that is not there. ``OTEL_SDK_DISABLED=true`` and
``OTEL_TRACES_EXPORTER=none`` turn it off whatever else is set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

log = logging.getLogger(__name__)

Exporter = Literal["otlp", "console"]
_EXPORTERS: tuple[Exporter, ...] = ("otlp", "console")
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def exporter_asked(environ: Mapping[str, str]) -> Exporter | None:
    """The span exporter ``environ`` asks for, or None when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not named:
        return "otlp" if any(environ.get(name, "").strip() for name in _ENDPOINTS) else None
    choices = [choice.strip() for choice in named.split(",") if choice.strip()]
    if "none" in choices:
        return None
    for exporter in _EXPORTERS:
        if exporter in choices:
            return exporter
    log.warning(
        "OTEL_TRACES_EXPORTER=%s: no such span exporter here (otlp, console, none): not tracing",
        named,
    )
    return None
