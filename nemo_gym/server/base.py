"""The base of every server: Starlette on uvicorn (uvloop + httptools), orjson bodies, a health endpoint,
loopback bind by default, structured logs and graceful shutdown.

A subclass lists its routes; handlers take and return plain JSON-compatible dicts. Errors become JSON bodies of the
form `{"error": {"failure_class": ..., "message": ...}}`, so a caller several hops away still knows what failed.
"""

import inspect
import logging
import os
import socket
from contextlib import asynccontextmanager
from typing import Any, Awaitable, Callable, ClassVar, Literal

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from nemo_gym.config.servers import SERVER_KINDS, ServerSettings, ServerSpec
from nemo_gym.config.typed import Settings, Text, UnknownKeys, build
from nemo_gym.errors import ConfigError
from nemo_gym.failures import REFUSAL_FIELD, FailureClass, failure_class_of, refusal_of
from nemo_gym.http_client import HttpClient, RequestFailed
from nemo_gym.open_files import allow_open_files_up_to_hard_limit
from nemo_gym.server.client import ServerClient
from nemo_gym.server.gc_pace import serving_pace
from nemo_gym.traces import names as span_names, switch as traces
from nemo_gym.traces.start import start_from_environment, stop_tracing

logger = logging.getLogger("nemo_gym.server")

JsonHandler = Callable[[dict[str, Any], Request], Awaitable[Any]]


class HandlerError(Exception):
    """Raised by a handler to answer with a specific status and failure class."""

    def __init__(self, status: int, message: str, failure_class: FailureClass = FailureClass.HTTP_4XX,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.failure_class = FailureClass(failure_class)
        self.extra = extra  # more fields of the error body (an endpoint's refusal, for one)


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def error_body(failure_class: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"failure_class": failure_class, "message": message, **extra}}


def error_response(status: int, failure_class: str, message: str, **extra: Any) -> Response:
    return json_response(error_body(failure_class, message, **extra), status)


def downstream_error_body(exc: RequestFailed) -> dict[str, Any]:
    """The body of a 502 for a downstream call that failed, carrying the class of the deepest hop that failed
    (a dead vLLM behind the model server reads `connect` at the collector, not the model server's `http_5xx`), and
    the model endpoint's refusal where the deepest hop met one (the collector stops the run on it)."""
    refusal = refusal_of(exc)
    relayed = {REFUSAL_FIELD: refusal.to_dict()} if refusal is not None else {}
    return error_body(failure_class_of(exc), exc.message, upstream_status=exc.status, **relayed)


def downstream_failed(exc: RequestFailed) -> Response:
    return json_response(downstream_error_body(exc), 502)


async def json_answer(path: str, handler: JsonHandler, raw: bytes, request: Request) -> tuple[int, bytes]:
    """The status and JSON body that `handler` (the route at `path`) answers the request body `raw` with: the one
    definition of a JSON route's answer, over HTTP (json_route) and between servers in one process
    (server/colocated.py)."""
    status, payload = await _handled(path, handler, raw, request)
    try:
        return status, orjson.dumps(payload)
    except TypeError as exc:  # orjson's encode error: a handler bug, answered as one
        logger.error("handler %s answered what JSON cannot hold: %s", path, exc)
        return 500, orjson.dumps(error_body(FailureClass.AGENT_ERROR, f"the answer is not JSON: {exc}"))


async def _handled(path: str, handler: JsonHandler, raw: bytes, request: Request) -> tuple[int, Any]:
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        return 400, error_body(FailureClass.HTTP_4XX, f"request body is not valid JSON: {exc}")
    try:
        return 200, await handler(body, request)
    except HandlerError as exc:
        return exc.status, error_body(exc.failure_class, exc.message, **exc.extra)
    except RequestFailed as exc:
        return 502, downstream_error_body(exc)
    except Exception as exc:  # noqa: BLE001 - a handler bug must answer 500, not drop the connection
        logger.exception("handler %s failed", path)
        return 500, error_body(FailureClass.AGENT_ERROR, f"{type(exc).__name__}: {exc}")


class JsonRoute(Route):
    """A route whose handler receives the decoded JSON body and returns a JSON-compatible value. A server in the
    same process calls `handler` directly (server/colocated.py)."""

    def __init__(self, path: str, handler: JsonHandler, methods: tuple[str, ...] = ("POST",)) -> None:
        self.handler = handler

        async def endpoint(request: Request) -> Response:
            status, content = await json_answer(path, handler, await request.body(), request)
            return Response(content, status_code=status, media_type="application/json")

        super().__init__(path, endpoint, methods=list(methods))


def json_route(path: str, handler: JsonHandler, methods: tuple[str, ...] = ("POST",)) -> Route:
    return JsonRoute(path, handler, methods)


def direct_dispatch(app: Starlette, routes: list[Route]) -> ASGIApp:
    """`app`, with each request whose path a route names exactly (no path parameters) sent straight to that route's
    endpoint: Starlette's middleware and route matching were a tenth of a server's CPU per request. Everything else
    (the lifespan, paths with parameters, unknown paths, other methods) goes through `app`. The endpoints answer
    their own errors (json_route); an exception that escapes one is uvicorn's 500, as it was Starlette's."""
    direct = {route.path: (route.methods or set(), route.endpoint) for route in routes
              if "{" not in route.path and inspect.iscoroutinefunction(route.endpoint)}

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            found = direct.get(scope["path"])
            if found is not None and scope["method"] in found[0]:
                response = await found[1](Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await app(scope, receive, send)

    return dispatch


class ServerRefSetting(Settings):
    """A reference to another server instance of the config."""

    type_label: ClassVar[str] = "a server reference {type, name}"
    type: Literal[SERVER_KINDS]  # type: ignore[valid-type]
    """The referenced server's kind."""
    name: Text
    """The referenced server's instance name."""


class ResourcesServerRef(ServerRefSetting):
    type_label: ClassVar[str] = "a reference {type: resources_servers, name: ...}"
    type: Literal["resources_servers"]


class ModelServerRef(ServerRefSetting):
    type_label: ClassVar[str] = "a reference {type: responses_api_models, name: ...}"
    type: Literal["responses_api_models"]


def server_settings(cls: type["BaseServer"], spec: ServerSpec, source_of: Callable[[str], str] | None = None,
                    unknown: UnknownKeys = "near_miss") -> ServerSettings:
    """`spec`'s settings as `cls.Settings`, or a ConfigError naming each bad setting (and its file and line).

    `unknown="ignore"` reads the settings every server shares before the implementation is known."""
    prefix = f"{spec.name}.{spec.kind}.{spec.implementation}"

    def where(field: str) -> str | None:
        found = source_of(f"{prefix}.{field}") if source_of else None
        return None if found in (None, "no config file") else f"set in {found}"

    settings = build(cls.Settings, spec.settings, name=lambda field: f"setting {prefix}.{field}", where=where,
                     unknown=unknown, label=f"server '{spec.name}': ")
    # Before the implementation is known (unknown="ignore") there is no class to ask whether it keeps state.
    if unknown != "ignore" and settings.workers is not None and settings.workers > 1 and not cls.stateless:
        place = where("workers")
        raise ConfigError(f"server '{spec.name}': setting {prefix}.workers is {settings.workers}, but "
                          f"{cls.__name__} keeps state between requests, so it runs as one process"
                          + (f" ({place})" if place else ""))
    return settings


def default_workers(cores: int) -> int:
    """Worker processes of a stateless server on `cores` cores: half of them (the rest of the stack needs the
    others), at least 1, at most 8."""
    return max(1, min(8, cores // 2))


class BaseServer:
    """Subclass and override `routes()`; `startup()`/`shutdown()` for resources; `ready()` for slow starts.

    A subclass with settings of its own declares them as `class Settings(<parent>.Settings)` and reads them from
    `self.settings`; `self.config` is the raw mapping, with the keys no implementation declares."""

    Settings: ClassVar[type[ServerSettings]] = ServerSettings
    # True when nothing a request leaves behind is needed by a later one, so several processes may serve the port.
    stateless: ClassVar[bool] = False

    def __init__(self, spec: ServerSpec, head_url: str | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.config = spec.settings
        self.settings = server_settings(type(self), spec)
        self.head_url = head_url
        self._http_client: HttpClient | None = None
        self._server_client: ServerClient | None = None
        # The JSON routes another server in this process may call without HTTP; set when the app is built.
        self.json_handlers: dict[str, JsonHandler] = {}

    @property
    def http(self) -> HttpClient:
        """The client this server calls others with; it exists between startup and shutdown."""
        if self._http_client is None:
            raise RuntimeError(f"server '{self.name}': its HTTP client opens when the server starts")
        return self._http_client

    @property
    def servers(self) -> ServerClient:
        """The other servers of the config, by name (through the head server); it exists once the server starts."""
        if self._server_client is None:
            raise RuntimeError(f"server '{self.name}': other servers are reachable once it starts with a head URL")
        return self._server_client

    @servers.setter
    def servers(self, servers: ServerClient) -> None:
        self._server_client = servers

    def routes(self) -> list[Route]:
        return []

    def span_attributes(self, path: str) -> span_names.Attributes:
        """What the span of a request to route `path` says besides its method and path (nemo_gym.traces.names),
        asked once per route, when the app is built with traces on."""
        return {}

    async def startup(self) -> None:
        """Open resources (called once, before the first request)."""

    async def shutdown(self) -> None:
        """Release resources (called once, on graceful shutdown)."""

    def ready(self) -> bool:
        """Whether the server can take work yet; /health answers 503 until it can."""
        return True

    async def _health(self, request: Request) -> Response:
        # The pid tells an operator (and a test) which worker process answered.
        if self.ready():
            return json_response({"status": "ok", "name": self.name, "pid": os.getpid()})
        return json_response({"status": "starting", "name": self.name, "pid": os.getpid()}, status=503)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette):
        # One attempt per call (HttpClient's default): a server calls others on behalf of a rollout, whose one retry
        # budget is the collector's (docs/architecture.md, "Retry budget"); a retry here would multiply it.
        self._http_client = HttpClient(
            connect_timeout_s=self.settings.connect_timeout_s,
            read_timeout_s=self.settings.read_timeout_s,
        )
        if self.head_url:
            self._server_client = ServerClient(self.head_url, self._http_client)
        await self.startup()
        try:
            with serving_pace():
                yield
        finally:
            await self.shutdown()
            await self.http.aclose()

    def app(self) -> ASGIApp:
        served = self.routes()
        tracing = traces.ACTIVE
        # Decided once, here: an untraced server does no tracing work per request. The head server (a directory,
        # inside ng_run or the e2e collector's own process) is never traced.
        if tracing is not None and self.spec.kind in SERVER_KINDS:
            served = [tracing.traced_route(route, self.span_attributes(route.path)) for route in served]
        # A traced route is a span per request: calls to it stay on HTTP, where the span is made.
        self.json_handlers = {route.path: route.handler for route in served
                              if isinstance(route, JsonRoute) and "POST" in (route.methods or ())}
        routes = [Route("/health", self._health, methods=["GET"]), *served]
        return direct_dispatch(Starlette(routes=routes, lifespan=self._lifespan), routes)

    @property
    def worker_count(self) -> int:
        if self.settings.workers is not None:
            return self.settings.workers
        return default_workers(len(os.sched_getaffinity(0))) if self.stateless else 1

    def serve(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        """Run until SIGTERM/SIGINT, then finish in-flight requests (bounded) and exit. With `sock` (bound, not
        yet listening), serve on it instead of binding `host`:`port`: ng_run always gives one (server/launch.py), as it
        holds the port until it stops. A subclass that overrides this must take `sock` too (ng_run checks,
        before any server starts: server/launch.py)."""
        allow_open_files_up_to_hard_limit()  # a socket per request in flight, and one per call it makes
        # Here, in the process that serves (a worker after its fork): the exporter's thread does not survive a fork.
        start_from_environment(self.name, **{span_names.SERVER_KIND: self.spec.kind,
                                             span_names.SERVER_IMPLEMENTATION: self.spec.implementation})
        try:
            self._run_uvicorn(host, port, sock)
        finally:
            stop_tracing()  # the spans still buffered go out before the process exits

    def _run_uvicorn(self, host: str, port: int, sock: socket.socket | None) -> None:
        uvicorn.Server(self.uvicorn_config(host, port)).run(sockets=[sock] if sock is not None else None)

    def uvicorn_config(self, host: str, port: int) -> uvicorn.Config:
        return uvicorn.Config(
            self.app(),
            host=host,
            port=port,
            loop="uvloop",
            http="httptools",
            log_config=None,
            access_log=False,
            # Servers talk to each other over loopback: no forwarding proxy to trust, and its middleware costs
            # CPU on every request.
            proxy_headers=False,
            server_header=False,
            backlog=4096,
            timeout_keep_alive=60,
            timeout_graceful_shutdown=5,
        )
