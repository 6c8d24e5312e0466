"""A real OTLP/HTTP trace receiver on loopback: `POST /v1/traces` bodies decoded with opentelemetry-proto's
`ExportTraceServiceRequest`, as a collector would, so a test reads the spans exactly as they went over the wire."""

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status_code: int = 0  # 2 = error


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    service=service, name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                    attributes=_attributes(span.attributes),
                    events=[(event.name, _attributes(event.attributes)) for event in span.events],
                    status_code=span.status.code))
    return spans


class OtlpReceiver:
    """Collects every span POSTed to `url` + /v1/traces; a body that does not decode is answered 400 and counted."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.bad_bodies = 0
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                try:
                    spans = decode(body) if self.path == "/v1/traces" else None
                except DecodeError:
                    spans = None
                with receiver._lock:
                    receiver.requests += 1
                    if spans is None:
                        receiver.bad_bodies += 1
                    else:
                        receiver.spans.extend(spans)
                reply = ExportTraceServiceResponse().SerializeToString() if spans is not None else b""
                self.send_response(200 if spans is not None else 400)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """The spans received once `done` holds for them; AssertionError naming what came if it does not in time."""
        deadline = time.monotonic() + timeout_s
        while not done(spans := self.received()):
            assert time.monotonic() < deadline, f"spans not complete after {timeout_s:g} s: " + \
                ", ".join(f"{s.service}:{s.name}" for s in spans)
            time.sleep(0.05)
        return spans


def in_trace(spans: list[ReceivedSpan], trace_id: str) -> Iterator[ReceivedSpan]:
    return (span for span in spans if span.trace_id == trace_id)
