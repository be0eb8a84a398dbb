"""A real OTLP/HTTP receiver on loopback: what a collector does with ``POST /v1/traces``.

It decodes each ``ExportTraceServiceRequest`` (protobuf, or OTLP's JSON encoding as Triton's
OpenTelemetry exporter sends it; gzip or not) with the ``opentelemetry-proto`` package, keeps
every span with its resource, and answers as a collector does (200 with an
``ExportTraceServiceResponse``). Tests point a server's ``OTEL_EXPORTER_OTLP_ENDPOINT`` at
:attr:`OtlpReceiver.endpoint` and look at :attr:`spans`.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in lowercase hex, as in a traceparent)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: str
    status_message: str
    start_ns: int
    end_ns: int
    #: The (trace id, span id) of each span it links to.
    links: tuple[tuple[str, str], ...] = ()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


#: The id fields OTLP's JSON encoding writes in hex, where protobuf's JSON mapping wants base64.
_HEX_IDS = ("traceId", "spanId", "parentSpanId")


def _base64_ids(item: Any) -> Any:
    """OTLP JSON with its hex ids (OTLP's rule for JSON) in protobuf's base64, recursively."""
    if isinstance(item, list):
        return [_base64_ids(each) for each in item]
    if not isinstance(item, dict):
        return item
    return {
        key: base64.b64encode(bytes.fromhex(value)).decode()
        if key in _HEX_IDS and isinstance(value, str)
        else _base64_ids(value)
        for key, value in item.items()
    }


def decode_json(body: bytes) -> list[ReceivedSpan]:
    """The spans of an export request in OTLP's JSON encoding."""
    request = ExportTraceServiceRequest()
    json_format.ParseDict(_base64_ids(json.loads(body)), request, ignore_unknown_fields=True)
    return decode(request.SerializeToString())


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=Span.SpanKind.Name(span.kind),
                        attributes=_attributes(span.attributes),
                        resource=resource,
                        status=Status.StatusCode.Name(span.status.code),
                        status_message=span.status.message,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        links=tuple(
                            (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                    )
                )
    return spans


class OtlpReceiver:
    """Collects the spans POSTed to ``/v1/traces``; every other request gets a 404."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        #: Every export request received (content types included), to see that one came.
        self.requests: list[dict[str, str]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                encoding = self.headers.get("content-encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                is_json = self.headers.get("content-type", "").startswith("application/json")
                spans = decode_json(body) if is_json else decode(body)
                with receiver._lock:
                    receiver.requests.append(dict(self.headers.items()))
                    receiver.spans.extend(spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
