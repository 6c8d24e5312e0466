"""The tracer of one process: spans batched (BatchSpanProcessor) and exported by OTLP over HTTP/protobuf, W3C
`traceparent` read from requests and added to calls. Imported only once traces are on (nemo_gym.traces.start)."""

from contextlib import contextmanager
from typing import Any, Awaitable, Iterator, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.routing import Route

from nemo_gym.model_calls import ModelCall
from nemo_gym.traces import names
from nemo_gym.traces.model_call_spans import traced_model_call
from nemo_gym.traces.server_spans import traced_route


def error_type(exc: BaseException) -> str:
    """What failed, without the exception's message (which may quote a body): its failure class, else its type."""
    failure_class = getattr(exc, "failure_class", None)
    return str(failure_class) if failure_class is not None else type(exc).__name__


def mark_failed(span: Span, error: str) -> None:
    span.set_attribute(names.ERROR_TYPE, error)
    span.set_status(Status(StatusCode.ERROR))


class Tracing:
    """Spans of this process, under the resource `resource` (service.name, ...), sent to `traces_url`."""

    def __init__(self, traces_url: str, resource: names.Attributes) -> None:
        self._provider = TracerProvider(resource=Resource.create(dict(resource)))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
        self._tracer = self._provider.get_tracer("nemo_gym")
        self._propagator = TraceContextTextMapPropagator()  # W3C only, whatever OTEL_PROPAGATORS says

    def with_traceparent(self, headers: dict[str, str] | None) -> dict[str, str] | None:
        """`headers` and the current span's `traceparent`; `headers` as they are when no span is current."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        if not carrier:
            return headers
        return {**headers, **carrier} if headers else carrier

    def parent_from(self, headers: Mapping[str, str]) -> Context:
        """The caller's span context that a request's `traceparent` names (an empty one without it)."""
        return self._propagator.extract(headers)

    @contextmanager
    def span(self, name: str, attributes: names.Attributes, *, kind: SpanKind = SpanKind.INTERNAL,
             parent: Context | None = None) -> Iterator[Span]:
        """A span current while the block runs; one that raises is marked failed with `error_type` only (an
        exception's message and stack are not recorded: they may quote a request)."""
        with self._tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes,
                                                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield span
            except BaseException as exc:
                mark_failed(span, error_type(exc))
                raise

    def failed(self, span: Span, error: str) -> None:
        """Mark `span` failed with `error`, a failure class."""
        mark_failed(span, error)

    def event(self, name: str, attributes: names.Attributes) -> None:
        """An event on the current span."""
        trace.get_current_span().add_event(name, attributes)

    def traced_route(self, route: Route, attributes: names.Attributes) -> Route:
        return traced_route(self, route, attributes)

    async def model_call(self, call: Awaitable[tuple[Any, ModelCall]], *, operation_path: str, model: str,
                         provider: str, base_url: str) -> tuple[Any, ModelCall]:
        return await traced_model_call(self, call, operation_path=operation_path, model=model, provider=provider,
                                       base_url=base_url)

    def stop(self) -> None:
        """Export what is buffered and stop (bounded by the exporter's timeout)."""
        self._provider.shutdown()
