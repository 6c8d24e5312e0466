"""The number-guessing game (rules in `game.py`) served for agents: `/seed_session` starts a game from the row's
`secret`, `low` and `high`, `POST /step` plays one move, `/verify` gives the game's total reward (1.0 solved, 0.0
not) plus `turns`, `solved` and `invalid_guesses`.

Driven by multi_turn_agent (configs/number_guess.yaml in its folder), not by tool calls.
"""

from typing import Any

from nemo_gym.resources_servers.number_guess import game
from nemo_gym.resources_servers.turn_based import TurnBasedResourcesServer, TurnResult


class NumberGuessResourcesServer(TurnBasedResourcesServer):
    def start(self, row: dict[str, Any]) -> dict[str, Any]:
        return dict(game.game_state({key: row.get(key) for key in ("secret", "low", "high")}))

    def play(self, state: dict[str, Any], text: str) -> TurnResult:
        turn = game.play_turn(game.game_state(state), text)
        return TurnResult(turn.observation, turn.reward, turn.terminated, dict(turn.state))

    def summary(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"solved": game.is_solved(game.game_state(state)),
                "invalid_guesses": sum(guess is None for guess in state["guesses"])}
