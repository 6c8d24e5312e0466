"""A model call's span: a CLIENT span per generation request a model server sends to its endpoint (one per replica
tried), with the call's record (nemo_gym.model_calls.ModelCall) as GenAI attributes: tokens, latency, waits and
attempts."""

from typing import TYPE_CHECKING, Any, Awaitable
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind

from nemo_gym.model_calls import ModelCall, public_endpoint
from nemo_gym.traces import names

if TYPE_CHECKING:
    from nemo_gym.traces.otel import Tracing


def operation(path: str) -> str:
    """GenAI's operation name of the endpoint path a request goes to."""
    return "text_completion" if path.endswith("/completions") and not path.endswith("/chat/completions") else "chat"


def request_attributes(model: str, provider: str, base_url: str) -> dict[str, str | int]:
    parts = urlsplit(base_url)
    found: dict[str, str | int] = {names.REQUEST_MODEL: model, names.PROVIDER: provider,
                                   names.REPLICA: public_endpoint(base_url), "server.address": parts.hostname or ""}
    if parts.port:
        found["server.port"] = parts.port
    return found


def record_attributes(record: ModelCall) -> dict[str, int | float]:
    """The record's measures; a token count the endpoint did not report is left out."""
    found: dict[str, int | float] = {names.CALL_ATTEMPTS: record.attempts, names.RATE_LIMITED: record.rate_limited,
                                     names.LATENCY_S: record.latency_s, names.WAIT_S: record.wait_s}
    counts = {names.INPUT_TOKENS: record.input_tokens, names.OUTPUT_TOKENS: record.output_tokens,
              names.CACHED_TOKENS: record.cached_tokens, names.REASONING_TOKENS: record.reasoning_tokens}
    found.update({name: count for name, count in counts.items() if count is not None})
    return found


async def traced_model_call(tracing: "Tracing", call: Awaitable[tuple[Any, ModelCall]], *, operation_path: str,
                            model: str, provider: str, base_url: str) -> tuple[Any, ModelCall]:
    """Await `call` (EndpointCalls.post) in its span: `<operation> <model>`."""
    name = operation(operation_path)
    with tracing.span(f"{name} {model}", {names.OPERATION: name, **request_attributes(model, provider, base_url)},
                      kind=SpanKind.CLIENT) as span:
        reply, record = await call
        span.set_attributes(record_attributes(record))
        return reply, record
