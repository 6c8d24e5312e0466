"""multi_turn_agent: one rollout = seed a turn-based environment, alternate model turns and environment steps, verify.

Each turn the model gets the conversation so far (the row's input, then every output item so far, observations
included) through `/v1/responses`, with the row's other create params passed through unchanged
(`return_token_id_information` included, so token ids come back on the assistant items). The assistant's text goes
to the resources server's `POST /step` (see `nemo_gym.resources_servers.turn_based`), whose observation joins the
conversation as a user message. The loop stops when the environment says the episode terminated, when the prompt no
longer fits the model's context or the request's `max_total_sequence_length` (an incomplete response with no
output), or after `max_turns` model turns (fewer if the request's `max_rollout_turns` says so); then `/verify` gets
the response whose `output` holds every item of the rollout in order, and whose `rollout_end` says which of the
three ended it (protocol.ROLLOUT_END_FIELD: terminated, truncated, max_turns).

An answer cut by `max_output_tokens` is still a move: the environment judges what the model wrote (as NeMo RL's
multi-turn rollouts do); only a full context ends the rollout early.

Settings (besides those of every agent, see `nemo_gym.responses_api_agents.base`):
    max_turns: 10               # model turns per rollout
"""

from typing import Any

from pydantic import Field

from nemo_gym.failures import FailureClass
from nemo_gym.protocol import MAX_TURNS, ROLLOUT_END_FIELD, TERMINATED, TRUNCATED, output_text
from nemo_gym.responses_api_agents.base import AgentServer, AgentSettings, input_items, turn_limit
from nemo_gym.server.base import HandlerError

DEFAULT_MAX_TURNS = 10


def user_message(text: str) -> dict[str, Any]:
    """An observation as a Responses input item: a user message."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _context_full(response: dict[str, Any]) -> bool:
    return response.get("status") == "incomplete" and not response["output"]


class MultiTurnAgentSettings(AgentSettings):
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1)
    """Model turns per rollout."""


class MultiTurnAgent(AgentServer):
    """Model turn -> `/step` -> observation, until terminated, a full context or `max_turns`."""

    Settings = MultiTurnAgentSettings
    settings: MultiTurnAgentSettings

    async def startup(self) -> None:
        await super().startup()
        self.max_turns = self.settings.max_turns

    async def _step(self, text: str, session_id: str) -> dict[str, Any]:
        step = await self.resources("/step", {"text": text}, session_id)
        if not (isinstance(step, dict) and isinstance(step.get("observation"), str)
                and isinstance(step.get("terminated"), bool)):
            raise HandlerError(502, "resources server's /step answered without 'observation' and 'terminated'",
                               FailureClass.INVALID_RESPONSE)
        return step

    async def run_loop(self, params: dict[str, Any], session_id: str) -> dict[str, Any]:
        items = input_items(params)
        outputs: list[dict[str, Any]] = []
        response: dict[str, Any] = {}
        end = MAX_TURNS
        for _ in range(turn_limit(params, self.max_turns)):
            response = await self.call_model({**params, "input": items + outputs}, session_id)
            if _context_full(response):
                end = TRUNCATED
                break
            outputs.extend(response["output"])
            step = await self._step(output_text(response), session_id)
            outputs.append(user_message(step["observation"]))
            if step["terminated"]:
                end = TERMINATED
                break
        return {**response, "output": outputs, ROLLOUT_END_FIELD: end}
