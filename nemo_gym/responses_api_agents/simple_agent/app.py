"""simple_agent: one rollout = seed the environment, let the model call its tools until it answers, then verify.

Settings (besides those of every agent, see `nemo_gym.responses_api_agents.base`):
    max_steps: 10               # model calls per rollout (fewer if the request's `max_rollout_turns` says so)
"""

from typing import Any

import orjson
from pydantic import Field

from nemo_gym.http_client import RequestFailed
from nemo_gym.protocol import (
    MAX_TURNS,
    ROLLOUT_END_FIELD,
    TERMINATED,
    TRUNCATED,
    function_call_output,
    function_calls,
)
from nemo_gym.responses_api_agents.base import AgentServer, AgentSettings, input_items, turn_limit

DEFAULT_MAX_STEPS = 10


def _declared_tools(params: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in params.get("tools") or [] if tool.get("type") == "function" and "name" in tool}


class SimpleAgentSettings(AgentSettings):
    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1)
    """Model calls per rollout."""


def _summed_usage(total: dict[str, Any] | None, usage: Any) -> dict[str, Any] | None:
    """Token usage of the whole rollout, as NeMo Gym's simple agent reports it: every model call's counts added."""
    if not isinstance(usage, dict):
        return total
    if total is None:
        return orjson.loads(orjson.dumps(usage))
    for key, value in usage.items():
        if isinstance(value, dict) and isinstance(total.get(key), dict):
            for sub, count in value.items():
                if type(count) is int and type(total[key].get(sub, 0)) is int:
                    total[key][sub] = total[key].get(sub, 0) + count
        elif type(value) is int and type(total.get(key, 0)) is int:
            total[key] = total.get(key, 0) + value
    return total


class SimpleAgent(AgentServer):
    """The model/tool loop between seed_session and verify."""

    Settings = SimpleAgentSettings
    settings: SimpleAgentSettings

    async def startup(self) -> None:
        await super().startup()
        self.max_steps = self.settings.max_steps

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
            result = await self.resources(f"/{name}", arguments, session_id)
        except RequestFailed as exc:
            # A 4xx (bad arguments for this tool) is the model's mistake; anything else is a failed rollout.
            if exc.status is None or not 400 <= exc.status < 500 or exc.status == 429:
                raise
            detail = exc.body.get("error", {}).get("message") if isinstance(exc.body, dict) else exc.body
            return function_call_output(call["call_id"], f"Error: {detail}")
        return function_call_output(call["call_id"], result)

    async def run_loop(self, params: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Call the model, run its tool calls, repeat until it answers without calls, stops early or `max_steps`.

        Returns the last response with `output` = every output item of the rollout, tool outputs included, `usage` =
        the tokens of all its model calls, and how the loop ended (protocol.ROLLOUT_END_FIELD): terminated by an
        answer without calls, truncated by a cut answer with calls pending, or max_turns.
        """
        items = input_items(params)
        allowed = _declared_tools(params)
        outputs: list[dict[str, Any]] = []
        response: dict[str, Any] = {}
        usage = None
        end = MAX_TURNS
        for _ in range(turn_limit(params, self.max_steps)):
            response = await self.call_model({**params, "input": items + outputs}, session_id)
            usage = _summed_usage(usage, response.get("usage"))
            outputs.extend(response["output"])
            calls = function_calls(response)
            if not calls or response.get("status") == "incomplete":
                end = TRUNCATED if calls else TERMINATED
                break
            for call in calls:
                outputs.append(await self._call_tool(call, allowed, session_id))
        return {**response, "output": outputs, "usage": usage, ROLLOUT_END_FIELD: end}
