"""A server's span per request: a route's endpoint wrapped, when the app is built with traces on, in a SERVER span
whose parent is the caller's `traceparent`."""

import inspect
from typing import TYPE_CHECKING

from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nemo_gym.traces import names

if TYPE_CHECKING:
    from nemo_gym.traces.otel import Tracing


def traced_route(tracing: "Tracing", route: Route, attributes: names.Attributes) -> Route:
    """`route` with its endpoint in a span named `<method> <path>`; a 5xx answer marks it failed. GET routes are
    left as they are: they are status polls (preflight, engine load, counters), a trace each would bury the
    rollouts'. So is a route whose endpoint is not a coroutine function (Starlette wraps those itself)."""
    endpoint = route.endpoint
    path = route.path
    if "POST" not in (route.methods or ()) or not inspect.iscoroutinefunction(endpoint):
        return route

    async def traced(request: Request) -> Response:
        with tracing.span(f"{request.method} {path}", {"http.request.method": request.method, "http.route": path,
                                                       **attributes},
                          kind=SpanKind.SERVER, parent=tracing.parent_from(request.headers)) as span:
            response: Response = await endpoint(request)
            span.set_attribute(names.HTTP_STATUS, response.status_code)
            if response.status_code >= 500:
                span.set_status(Status(StatusCode.ERROR))
            return response

    return Route(path, traced, methods=list(route.methods or ()), name=route.name)
