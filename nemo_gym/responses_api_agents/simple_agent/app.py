"""simple_agent: one rollout = seed the environment, let the model call its tools until it answers, then verify.

Settings:
    resources_server: {type: resources_servers, name: ...}
    model_server: {type: responses_api_models, name: ...}
    max_steps: 10               # model calls per rollout
    model_timeout_s: 600        # per model call
    resources_timeout_s: 300    # per seed_session / tool / verify call
"""

import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nemo_gym.errors import ConfigError, NemoGymError
from nemo_gym.http_client import NO_RETRY, RequestFailed
from nemo_gym.protocol import SESSION_HEADER, function_call_output, function_calls
from nemo_gym.server.base import BaseServer, HandlerError, error_response, json_route

DEFAULT_MAX_STEPS = 10


def _input_items(params: dict[str, Any]) -> list[dict[str, Any]]:
    input_ = params.get("input", [])
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise HandlerError(400, "responses_create_params.input must be a string or a list of items")
    return input_


def _declared_tools(params: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in params.get("tools") or [] if tool.get("type") == "function" and "name" in tool}


class SimpleAgent(BaseServer):
    """Serves `POST /run`, `POST /v1/responses` and `POST /aggregate_metrics`."""

    async def startup(self) -> None:
        self.resources_server = self.spec.ref("resources_server").name
        self.model_server = self.spec.ref("model_server").name
        self.max_steps = int(self.config.get("max_steps", DEFAULT_MAX_STEPS))
        if self.max_steps < 1:
            raise ConfigError(f"server '{self.name}': max_steps must be at least 1, got {self.max_steps}")
        self.model_timeout_s = float(self.config.get("model_timeout_s", 600.0))
        self.resources_timeout_s = float(self.config.get("resources_timeout_s", 300.0))

    def routes(self) -> list[Route]:
        return [
            json_route("/run", self._run),
            json_route("/v1/responses", self._responses),
            Route("/aggregate_metrics", self._aggregate_metrics, methods=["POST"]),
        ]

    async def _resources(self, path: str, body: Any, session_id: str, **kwargs: Any) -> Any:
        return await self.servers.post(
            self.resources_server, path, body,
            headers={SESSION_HEADER: session_id}, timeout_s=self.resources_timeout_s, **kwargs,
        )

    async def _call_tool(self, call: dict[str, Any], allowed: set[str], session_id: str) -> dict[str, Any]:
        """The function_call_output item answering `call`; mistakes of the model are told to the model."""
        name = call.get("name", "")
        if name not in allowed:
            return function_call_output(call["call_id"], f"Error: no tool named '{name}' is available.")
        try:
            arguments = orjson.loads(str(call.get("arguments") or "{}"))
        except orjson.JSONDecodeError as exc:
            return function_call_output(call["call_id"], f"Error: the arguments are not valid JSON ({exc}).")
        if not isinstance(arguments, dict):
            return function_call_output(call["call_id"], "Error: the arguments must be a JSON object.")
        try:
            # No retry: a tool may change state, and a second attempt could apply the change twice.
            result = await self._resources(f"/{name}", arguments, session_id, retry=NO_RETRY)
        except RequestFailed as exc:
            # A 4xx (bad arguments for this tool) is the model's mistake; anything else is a failed rollout.
            if exc.status is None or not 400 <= exc.status < 500 or exc.status == 429:
                raise
            detail = exc.body.get("error", {}).get("message") if isinstance(exc.body, dict) else exc.body
            return function_call_output(call["call_id"], f"Error: {detail}")
        return function_call_output(call["call_id"], result)

    async def run_loop(self, params: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Call the model, run its tool calls, repeat until it answers without calls, stops early or `max_steps`.

        Returns the last response with `output` = every output item of the rollout, tool outputs included.
        """
        input_items = _input_items(params)
        allowed = _declared_tools(params)
        outputs: list[dict[str, Any]] = []
        response: dict[str, Any] = {}
        for _ in range(self.max_steps):
            response = await self.servers.post(
                self.model_server, "/v1/responses", {**params, "input": input_items + outputs},
                headers={SESSION_HEADER: session_id}, timeout_s=self.model_timeout_s,
            )
            if not isinstance(response, dict) or not isinstance(response.get("output"), list):
                raise HandlerError(502, "model server answered without an 'output' list", "invalid_response")
            outputs.extend(response["output"])
            calls = function_calls(response)
            if not calls or response.get("status") == "incomplete":
                break
            for call in calls:
                outputs.append(await self._call_tool(call, allowed, session_id))
        return {**response, "output": outputs}

    async def _run(self, row: dict[str, Any], request: Request) -> dict[str, Any]:
        params = row.get("responses_create_params") if isinstance(row, dict) else None
        if not isinstance(params, dict):
            raise HandlerError(400, "the input row needs a 'responses_create_params' object")
        session_id = uuid.uuid4().hex
        await self._resources("/seed_session", row, session_id)
        response = await self.run_loop(params, session_id)
        return await self._resources("/verify", {**row, "response": response}, session_id)

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise HandlerError(400, "the body must be Responses create params")
        return await self.run_loop(params, request.headers.get(SESSION_HEADER) or uuid.uuid4().hex)

    async def _aggregate_metrics(self, request: Request) -> Response:
        """Forwarded to the resources server as bytes, never decoded here: when the environment asks for the
        rollouts' rows, the body holds one row per rollout, which as Python objects would be gigabytes."""
        try:
            url = f"{await self.servers.url(self.resources_server)}/aggregate_metrics"
            status, content = await self.http.forward(url, request.stream(), timeout_s=self.resources_timeout_s)
        except RequestFailed as exc:
            return error_response(502, exc.failure_class, exc.message, upstream_status=exc.status)
        except NemoGymError as exc:
            return error_response(502, "connect", str(exc))
        return Response(content, status_code=status, media_type="application/json")
