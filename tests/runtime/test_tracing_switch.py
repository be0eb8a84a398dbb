"""Whether the runtime traces, from the standard OTEL_* variables."""

from __future__ import annotations

import pytest

from cachefleet.runtime.tracing.switch import exporter_asked


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, None),
        # Only naming the service asks for nothing to be sent anywhere.
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "zipkin,otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, None),
    ],
)
def test_tracing_is_on_only_when_asked(environ: dict[str, str], exporter: str | None) -> None:
    assert exporter_asked(environ) == exporter


def test_an_exporter_this_runtime_lacks_is_said_and_not_traced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert exporter_asked({"OTEL_TRACES_EXPORTER": "jaeger"}) is None
    assert "OTEL_TRACES_EXPORTER=jaeger" in caplog.text
