"""The base of environments played turn by turn: the agent sends each of the model's messages to `POST /step`.

A turn-based environment is not a set of tools the model calls: the agent (multi_turn_agent) drives it. It seeds
the session from the input row, posts the assistant's text of every turn to `/step` and shows the model the
observation as the next user message, until `/step` says the episode terminated. `verify` then gives the sum of the
turn rewards plus `turns` and the environment's own summary fields.

A subclass implements three pure hooks over a JSON-compatible state:

    start(row) -> state                    the episode's first state (raise ValueError for a row it cannot play)
    play(state, text) -> TurnResult        one move: observation, reward, terminated, the next state
    summary(state) -> dict                 extra fields for the verify result (optional)

`/step` takes `{"text": <assistant text>}` with the session header and answers
`{"observation", "reward", "terminated", "turn"}`.
"""

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import SESSION_HEADER
from nemo_gym.resources_servers.base import ResourcesServer, session_id_of
from nemo_gym.server.base import HandlerError, json_route

STEP_ROUTE = "step"


@dataclass(frozen=True)
class TurnResult:
    observation: str
    reward: float
    terminated: bool
    state: dict[str, Any]


class TurnBasedResourcesServer(ResourcesServer):
    """Serves `/step` over `start` / `play`; `verify` sums the turn rewards of the session."""

    def start(self, row: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement start()")

    def play(self, state: dict[str, Any], text: str) -> TurnResult:
        raise NotImplementedError(f"{type(self).__name__} must implement play()")

    def summary(self, state: dict[str, Any]) -> dict[str, Any]:
        return {}

    def routes(self) -> list[Route]:
        if STEP_ROUTE in self.tools():
            raise ValueError(f"tool name '{STEP_ROUTE}' clashes with the /step route of turn-based environments")
        return [*super().routes(), json_route(f"/{STEP_ROUTE}", self._step_route)]

    def _episode(self, session_id: str, route: str) -> dict[str, Any]:
        """The session's episode record: {state, rewards, terminated}."""
        if not session_id:
            raise HandlerError(400, f"{route} needs the session header '{SESSION_HEADER}'")
        episode = self.session_state(session_id)
        if "state" not in episode:
            raise HandlerError(400, f"{route}: no episode for session '{session_id}' (call /seed_session first)")
        return episode

    async def seed_session(self, row: dict[str, Any], session_id: str) -> dict[str, Any]:
        if not session_id:
            raise HandlerError(400, f"/seed_session needs the session header '{SESSION_HEADER}'")
        try:
            state = self.start(row)
        except ValueError as exc:
            raise HandlerError(400, f"cannot start an episode from this row: {exc}") from None
        self.session_state(session_id).update(state=state, rewards=[], terminated=False)
        return {}

    async def _step_route(self, body: Any, request: Request) -> dict[str, Any]:
        episode = self._episode(session_id_of(request), "/step")
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise HandlerError(400, "/step needs {'text': <the assistant's message text>}")
        if episode["terminated"]:
            raise HandlerError(409, f"/step: the episode ended after turn {len(episode['rewards'])}")
        result = self.play(episode["state"], text)
        episode["state"] = result.state
        episode["rewards"].append(float(result.reward))
        episode["terminated"] = bool(result.terminated)
        return {"observation": result.observation, "reward": float(result.reward),
                "terminated": bool(result.terminated), "turn": len(episode["rewards"])}

    async def verify(self, row: dict[str, Any], response: dict[str, Any], session_id: str = "") -> dict[str, Any]:
        episode = self._episode(session_id, "/verify")
        rewards = episode["rewards"]
        return {"reward": sum(rewards), "turns": len(rewards), **self.summary(episode["state"])}
