"""NumberGuessEnvironment: the number-guessing game (rules in `nemo_gym.resources_servers.number_guess.game`) for
multi-turn rollouts in a trainer.

A sample's `extra_env_info` is the game state: `game.game_state(row)` of a generated row (`secret`, `low`, `high`;
`guesses` so far, empty at the start), and its prompt is `game.instructions(low, high)` as the user message. Every
step plays the last assistant message as one move. Per sample it answers: the game's reply as a user message
("Higher.", "Lower.", "Correct! The number was 42.", "Invalid guess: ..."); as metadata, `extra_env_info` with the
state after the move (the rollout makes it the sample's next `extra_env_info`); reward 1.0 for the correct guess,
0.0 otherwise; terminated once the number is guessed. A sample without a valid state, or whose game was already
solved, raises EnvironmentStepError naming it.
"""

from typing import Any, Optional

from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_gym.experience.environments.step_batch import check_batch, environment_return, last_assistant_content
from nemo_gym.experience.errors import EnvironmentStepError
from nemo_gym.resources_servers.number_guess import game


class NumberGuessEnvironment(EnvironmentInterface):
    async def step(self, message_log_batch: list[list[dict[str, str]]],
                   metadata: list[Optional[dict[str, Any]]]) -> EnvironmentReturn:
        check_batch(message_log_batch, metadata)
        turns = []
        for sample, (log, info) in enumerate(zip(message_log_batch, metadata)):
            text = last_assistant_content(log, sample)
            try:
                turns.append(game.play_turn(game.game_state(info), text))
            except (game.InvalidGameError, game.GameOverError) as exc:
                raise EnvironmentStepError(f"sample {sample}: {exc}") from exc
        return environment_return(
            observations=[{"role": "user", "content": turn.observation} for turn in turns],
            # Other keys of extra_env_info (a dataset's own fields) are kept.
            metadata=[{**(info or {}), **turn.state} for info, turn in zip(metadata, turns)],  # game_state refused None
            rewards=[turn.reward for turn in turns],
            terminateds=[turn.terminated for turn in turns],
            answers=[None if turn.guess is None else str(turn.guess) for turn in turns],
        )
