"""Tracing is chosen once, at start-up: without OTEL_* the server is built exactly as before (no
span around the infer endpoint, the plain request ledger, no span pipeline); with them, all
three, and the infer front stays in front, memo and all."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.http.infer_front import InferFront
from cachefleet.runtime.http.traced import TracedInfer
from cachefleet.runtime.server import create_server
from cachefleet.runtime.service.request_ledger import RequestLedger
from cachefleet.runtime.service.traced_ledger import TracedLedger
from cachefleet.runtime.tracing.pipeline import TracingPipeline


@pytest.fixture
def settings(tmp_path: Path) -> RuntimeSettings:
    return RuntimeSettings.model_validate({"models": {"repository": str(tmp_path)}})


@pytest.fixture(autouse=True)
def no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)


def test_without_otel_variables_the_server_is_the_plain_one(settings: RuntimeSettings) -> None:
    server = create_server(settings)
    assert type(server) is InferFront
    assert not isinstance(server.serve, TracedInfer)


def test_an_otlp_endpoint_serves_infer_requests_in_spans_behind_the_same_front(
    settings: RuntimeSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    server = create_server(settings)
    assert type(server) is InferFront
    assert isinstance(server.serve, TracedInfer)


async def test_the_runtime_traces_only_with_an_exporter(settings: RuntimeSettings) -> None:
    async with Runtime.open(settings) as runtime:
        assert runtime.tracing is None
        assert type(runtime.ledger) is RequestLedger
    async with Runtime.open(settings, trace_exporter="otlp") as runtime:
        assert isinstance(runtime.tracing, TracingPipeline)
        assert type(runtime.ledger) is TracedLedger
