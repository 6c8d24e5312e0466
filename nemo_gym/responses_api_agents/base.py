"""The base of agent servers: one rollout = seed the environment, run the agent's loop, verify.

A subclass implements `run_loop(params, session_id)`, which drives the model server and the resources server for one
rollout and returns the final Responses object whose `output` holds every item of the rollout in order. The base
serves `POST /run` (seed_session -> run_loop -> verify), `POST /v1/responses` (run_loop alone) and
`POST /aggregate_metrics` (forwarded to the resources server).

A request's `max_rollout_turns` (see `turn_limit`) lowers the agent's own limit on model calls for that rollout.

Settings every agent takes:
    resources_server: {type: resources_servers, name: ...}
    model_server: {type: responses_api_models, name: ...}
    model_timeout_s: ...        # per model call (nemo_gym.config.timeouts.MODEL_CALL_TIMEOUT_S)
    resources_timeout_s: ...    # per seed_session / tool / step / verify call (RESOURCES_CALL_TIMEOUT_S)

Each model call's record (`nemo_gym.model_calls`: latency, attempts, 429s, tokens), taken out of the model server's
reply, is listed in the rollout's row under `_ng_model_calls` (`run_format.MODEL_CALLS`); a model server that sends
none gets a record of what the agent saw (its latency and the reply's usage).

A downstream call that fails answers 502 with the downstream failure class (see `nemo_gym.server.base.json_route`),
so the collector records what really failed; it never becomes a reward. Servers do not retry: the collector owns
the one retry budget (docs/architecture.md, "Retry budget").
"""

import time
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from pydantic import Field

from nemo_gym.config.servers import ServerSettings
from nemo_gym.config.timeouts import MODEL_CALL_TIMEOUT_S, RESOURCES_CALL_TIMEOUT_S
from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.failures import FailureClass
from nemo_gym.http_client import RequestFailed
from nemo_gym.model_calls import REPLY_FIELD, ModelCall, usage_counts
from nemo_gym.protocol import MAX_TURNS_PARAM, SESSION_HEADER, new_session_id
from nemo_gym.run_format import MODEL_CALLS
from nemo_gym.server.base import (
    BaseServer,
    HandlerError,
    ModelServerRef,
    ResourcesServerRef,
    downstream_failed,
    error_response,
    json_route,
)
from nemo_gym.traces import names as span_names


def input_items(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The create params' `input` as a list of items (a plain string is one user message)."""
    input_ = params.get("input", [])
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise HandlerError(400, "responses_create_params.input must be a string or a list of items")
    return input_


def turn_limit(params: dict[str, Any], configured: int) -> int:
    """Model calls this rollout may make: the agent's own limit, lowered by the request's `max_rollout_turns` (a
    trainer's limit for its rollouts; model servers ignore the field)."""
    requested = params.get(MAX_TURNS_PARAM)
    if requested is None:
        return configured
    if type(requested) is not int or requested < 1:
        raise HandlerError(400, f"responses_create_params.{MAX_TURNS_PARAM} must be a positive integer, "
                                f"got {requested!r}")
    return min(configured, requested)


class AgentSettings(ServerSettings):
    resources_server: ResourcesServerRef
    """The environment this agent's rollouts run in."""
    model_server: ModelServerRef
    """The policy model."""
    model_timeout_s: float = Field(MODEL_CALL_TIMEOUT_S, gt=0)
    """Seconds per model call."""
    resources_timeout_s: float = Field(RESOURCES_CALL_TIMEOUT_S, gt=0)
    """Seconds per seed_session / tool / step / verify call."""
    datasets: list[dict[str, Any]] | None = None
    """This agent's datasets ({name, type, jsonl_fpath, ...}), read by ng_e2e_collect_rollouts per split."""


class AgentServer(BaseServer):
    """Serves `POST /run`, `POST /v1/responses` and `POST /aggregate_metrics` around a subclass's `run_loop`."""

    Settings: ClassVar[type[AgentSettings]] = AgentSettings  # subclasses narrow it
    settings: AgentSettings
    stateless = True  # a rollout's state lives in the resources server, keyed by the session id it is given

    async def startup(self) -> None:
        self._model_calls: dict[str, list[dict[str, Any]]] = {}  # per rollout (session id) running /run
        self.resources_server = self.settings.resources_server.name
        self.model_server = self.settings.model_server.name
        self.model_timeout_s = self.settings.model_timeout_s
        self.resources_timeout_s = self.settings.resources_timeout_s

    def span_attributes(self, path: str) -> span_names.Attributes:
        return span_names.agent_run(self.name) if path == "/run" else {}

    def routes(self) -> list[Route]:
        return [
            json_route("/run", self._run),
            json_route("/v1/responses", self._responses),
            Route("/aggregate_metrics", self._aggregate_metrics, methods=["POST"]),
        ]

    async def run_loop(self, params: dict[str, Any], session_id: str) -> dict[str, Any]:
        """One rollout's model/environment loop; the returned response's `output` holds every item in order."""
        raise NotImplementedError(f"{type(self).__name__} must implement run_loop()")

    async def resources(self, path: str, body: Any, session_id: str, **kwargs: Any) -> Any:
        """POST to the resources server within the rollout `session_id`."""
        return await self.servers.post(
            self.resources_server, path, body,
            headers={SESSION_HEADER: session_id}, timeout_s=self.resources_timeout_s, **kwargs,
        )

    async def call_model(self, params: dict[str, Any], session_id: str) -> dict[str, Any]:
        """One model call with `params` passed through unchanged; the answer must have an `output` list. Its
        record goes to the rollout's list of model calls."""
        started_at, started = time.time(), time.monotonic()
        response = await self.servers.post(
            self.model_server, "/v1/responses", params,
            headers={SESSION_HEADER: session_id}, timeout_s=self.model_timeout_s,
        )
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            raise HandlerError(502, "model server answered without an 'output' list", FailureClass.INVALID_RESPONSE)
        record = response.pop(REPLY_FIELD, None)
        calls = self._model_calls.get(session_id)
        if calls is not None:
            if not isinstance(record, dict):  # a model server of someone else's: what this agent saw
                record = ModelCall(endpoint=self.model_server, model=str(response.get("model") or ""),
                                   started_at=started_at, latency_s=round(time.monotonic() - started, 6),
                                   **usage_counts(response.get("usage"))).to_dict()
            calls.append(record)
        return response

    async def _run(self, row: dict[str, Any], request: Request) -> dict[str, Any]:
        params = row.get("responses_create_params") if isinstance(row, dict) else None
        if not isinstance(params, dict):
            raise HandlerError(400, "the input row needs a 'responses_create_params' object")
        session_id = new_session_id()
        calls = self._model_calls[session_id] = []
        try:
            await self.resources("/seed_session", row, session_id)
            response = await self.run_loop(params, session_id)
            verified = await self.resources("/verify", {**row, "response": response}, session_id)
        finally:
            del self._model_calls[session_id]
        if isinstance(verified, dict):
            verified[MODEL_CALLS] = calls
        return verified

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise HandlerError(400, "the body must be Responses create params")
        return await self.run_loop(params, request.headers.get(SESSION_HEADER) or new_session_id())

    async def _aggregate_metrics(self, request: Request) -> Response:
        """Forwarded to the resources server as bytes, never decoded here: when the environment asks for the
        rollouts' rows, the body holds one row per rollout, which as Python objects would be gigabytes."""
        try:
            url = f"{await self.servers.url(self.resources_server)}/aggregate_metrics"
            status, content = await self.http.forward(url, request.stream(), timeout_s=self.resources_timeout_s)
        except RequestFailed as exc:
            return downstream_failed(exc)
        except (NemoGymError, DownstreamError) as exc:  # no head server, or no such resources server on it
            return error_response(502, FailureClass.CONNECT, str(exc))
        return Response(content, status_code=status, media_type="application/json")
