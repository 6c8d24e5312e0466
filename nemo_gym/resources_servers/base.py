"""The base of every resources server (an environment): tools the model can call, and a verifier that gives the reward.

An environment subclasses `ResourcesServer`, marks its tool methods with `@tool` and overrides `verify`:

    class Weather(ResourcesServer):
        @tool
        async def get_weather(self, city: str) -> dict:
            return {"city": city, "forecast": "sunny"}

        async def verify(self, row: dict, response: dict) -> dict:
            return {"reward": 1.0 if ... else 0.0}

A `verify` that cannot score the rollout (an outside judge failed) returns `failed_verification(...)` instead: a
recorded failure, never a reward.

Routes: `POST /seed_session`, `POST /verify`, `POST /aggregate_metrics` and `POST /<tool name>` per tool. Tool
arguments arrive as keyword arguments; a tool (or `verify`) that declares a `session_id` parameter also gets the id
of the rollout (from the session header), to find its state with `self.session_state(session_id)`.
"""

import inspect
import time
from collections import OrderedDict
from typing import Any, Callable, ClassVar

from starlette.requests import Request
from starlette.routing import Route
from pydantic import Field

from nemo_gym.compat.markers import ERROR_MESSAGE_KEY, FAILURE_CLASS_KEY
from nemo_gym.compat.verify_responses import VerifyResponsesError, verify_response_rows
from nemo_gym.config.servers import ServerSettings, ServerSpec
from nemo_gym.failures import FailureClass
from nemo_gym.protocol import SESSION_HEADER
from nemo_gym.resources_servers.metrics import group_mean_reward, headline_metrics, summarize
from nemo_gym.server.base import BaseServer, HandlerError, json_route
from nemo_gym.traces import names as span_names

_TOOL_MARK = "_ng_tool"
SESSION_PARAM = "session_id"
RESERVED_NAMES = frozenset({"seed_session", "verify", "aggregate_metrics", "health"})
DEFAULT_SESSION_TTL_S = 3600.0


def tool(func: Callable[..., Any]) -> Callable[..., Any]:
    """Serve this method as a tool at `POST /<method name>`; the request body holds its keyword arguments."""
    setattr(func, _TOOL_MARK, True)
    return func


def failed_verification(failure_class: FailureClass, message: str, **fields: Any) -> dict[str, Any]:
    """What `verify` returns when it could not score the rollout (its judge model failed, say): the reply is marked
    failed (NeMo Gym's `_ng_failure_class`), so the collector records a failure of `failure_class` and keeps the
    rollout for `ng_reverify_rollouts`; no reward is given."""
    return {FAILURE_CLASS_KEY: failure_class, ERROR_MESSAGE_KEY: message, **fields}


def session_id_of(request: Request) -> str:
    return request.headers.get(SESSION_HEADER, "")


class ResourcesSettings(ServerSettings):
    session_ttl_s: float = Field(DEFAULT_SESSION_TTL_S, gt=0)
    """Seconds a rollout's session state is kept after its last use."""


class ResourcesServer(BaseServer):
    """Override `verify`; optionally `seed_session`, `compute_metrics`, `key_metrics`; add tools with `@tool`."""

    Settings: ClassVar[type[ResourcesSettings]] = ResourcesSettings  # subclasses narrow it
    settings: ResourcesSettings

    def __init__(self, spec: ServerSpec, head_url: str | None = None) -> None:
        super().__init__(spec, head_url)
        # Ordered by last access, so expired sessions are always at the front.
        self._sessions: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._session_ttl_s = self.settings.session_ttl_s
        self._verify_wants_session = SESSION_PARAM in inspect.signature(self.verify).parameters

    # ---- hooks for environments ----

    def tools(self) -> dict[str, Callable[..., Any]]:
        """Tool name -> bound method; by default every method marked with `@tool`."""
        return {
            name: getattr(self, name)
            for name, member in inspect.getmembers(type(self))
            if callable(member) and getattr(member, _TOOL_MARK, False)
        }

    async def seed_session(self, row: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Prepare the environment for one rollout of `row`; the returned dict goes back to the agent."""
        return {}

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        """Score `response` (a Responses API response) for `row`: return at least `reward`, plus any extra fields."""
        raise NotImplementedError(f"{type(self).__name__} must implement verify()")

    def compute_metrics(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Agent-level metrics over rollout rows: mean/std/min/max of every numeric field by default.

        From the collector, `rows` are compact (keys and scalar fields; no transcripts: put what a metric needs
        into a scalar field in `verify`) and the library's metrics (medians, pass@k, majority@k, bootstrap
        interval, failure rates) are already computed: an override adds to them, the default adds nothing. Over rows
        alone (NeMo Gym's collector) an override adds to the default's statistics of those rows.
        """
        return summarize(rows)

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The few metrics worth a headline: mean reward, its 95% interval and the widest pass@k/majority@k."""
        return headline_metrics(agent_metrics)

    def group_metrics(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per-task metrics, each with `_ng_task_index` (mean reward by default; from the collector, an override
        adds to the library's per-task statistics)."""
        return group_mean_reward(rows)

    def needs_rows(self) -> bool:
        """Whether the collector must send the compact rows for `compute_metrics` / `group_metrics`."""
        return self._overrides("compute_metrics") or self._overrides("group_metrics")

    def _overrides(self, hook: str) -> bool:
        return getattr(type(self), hook) is not getattr(ResourcesServer, hook)

    # ---- per-rollout state ----

    def session_state(self, session_id: str) -> dict[str, Any]:
        """The mutable state of one rollout; dropped after its verify, or after `session_ttl_s` without use
        (a rollout that failed before verify would otherwise leak its state)."""
        now = time.monotonic()
        entry = self._sessions.pop(session_id, None)
        state = entry[1] if entry is not None else {}
        self._sessions[session_id] = (now, state)
        while self._sessions:
            oldest, (touched, _) = next(iter(self._sessions.items()))
            if now - touched < self._session_ttl_s:
                break
            del self._sessions[oldest]
        return state

    def drop_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    # ---- routes ----

    def span_attributes(self, path: str) -> span_names.Attributes:
        # A trace shows seed_session, each tool call and verify as the rollout's environment steps.
        step = path.removeprefix("/")
        if step in ("seed_session", "verify"):
            return span_names.environment_step(step)
        return span_names.environment_step(step, tool=True) if step in self.tools() else {}

    def routes(self) -> list[Route]:
        routes = [
            json_route("/seed_session", self._seed_session_route),
            json_route("/verify", self._verify_route),
            json_route("/aggregate_metrics", self._aggregate_metrics_route),
        ]
        for name, method in self.tools().items():
            if name in RESERVED_NAMES:
                raise ValueError(f"tool name '{name}' clashes with a built-in route of resources servers")
            routes.append(json_route(f"/{name}", self._tool_route(name, method)))
        return routes

    async def _seed_session_route(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return await self.seed_session(body, session_id_of(request)) or {}

    async def _verify_route(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        response = body.get("response") if isinstance(body, dict) else None
        if not isinstance(response, dict):
            raise HandlerError(400, "verify needs the input row plus a 'response' object")
        row = {key: value for key, value in body.items() if key != "response"}
        session_id = session_id_of(request)
        extra = {SESSION_PARAM: session_id} if self._verify_wants_session else {}
        try:
            result = await self.verify(row, response, **extra)
        finally:
            self.drop_session(session_id)
        if FAILURE_CLASS_KEY in result:  # see failed_verification: no reward, whatever the body held
            return {key: value for key, value in {**body, **result}.items() if key != "reward"}
        if "reward" not in result:
            raise TypeError(f"{type(self).__name__}.verify() returned no 'reward'")
        return {**body, **result, "reward": float(result["reward"])}

    async def _aggregate_metrics_route(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        """Three callers: rows only (the hooks compute everything), also as NeMo Gym's `verify_responses`; from the
        collector, the library's metrics alone first, then, only if `needs_rows` was answered, the same with the
        compact rows."""
        if not isinstance(body, dict):
            raise HandlerError(400, "aggregate_metrics needs a JSON object")
        try:
            rows = verify_response_rows(body)
        except VerifyResponsesError as exc:
            raise HandlerError(400, str(exc)) from None
        if rows is None:
            rows = body.get("rows")
        library = body.get("agent_metrics")
        if rows is not None and not isinstance(rows, list):
            raise HandlerError(400, "aggregate_metrics: 'rows' must be a list")
        if not isinstance(library, dict):
            if rows is None:
                raise HandlerError(400, "aggregate_metrics needs {'rows': [...]} or {'agent_metrics': {...}}")
            # Rows alone (NeMo Gym's collector) come with no library metrics: an override adds to the generic ones.
            generic = summarize(rows) if self._overrides("compute_metrics") else {}
            agent_metrics = {**generic, **self.compute_metrics(rows)}
            return {
                "agent_metrics": agent_metrics,
                "key_metrics": self.key_metrics(agent_metrics),
                "group_level_metrics": self.group_metrics(rows),
            }
        # The default row hooks would only recompute what the library sent: rows are asked for (a million of them
        # cost a gigabyte here) only when an environment overrides one.
        if rows is None:
            if self.needs_rows():
                return {"needs_rows": True}
            rows = []
        agent_metrics = {**library, **(self.compute_metrics(rows) if self._overrides("compute_metrics") else {})}
        return {
            "agent_metrics": agent_metrics,
            "key_metrics": self.key_metrics(agent_metrics),
            "group_level_metrics": self.group_metrics(rows) if self._overrides("group_metrics") else [],
        }

    def _tool_route(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(method)
        wants_session = SESSION_PARAM in signature.parameters

        async def handler(body: Any, request: Request) -> Any:
            # A 400 here is the model's mistake, not the server's: the agent shows it to the model.
            if not isinstance(body, dict):
                raise HandlerError(400, f"arguments of tool '{name}' must be a JSON object")
            if SESSION_PARAM in body and wants_session:
                raise HandlerError(400, f"tool '{name}' takes no argument '{SESSION_PARAM}'")
            kwargs = {**body, SESSION_PARAM: session_id_of(request)} if wants_session else body
            try:
                signature.bind(**kwargs)
            except TypeError as exc:
                raise HandlerError(400, f"invalid arguments for tool '{name}': {exc}") from None
            result = method(**kwargs)
            return await result if inspect.isawaitable(result) else result

        return handler
