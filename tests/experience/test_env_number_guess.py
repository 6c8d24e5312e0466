"""NumberGuessEnvironment: one game move per step on hand-written message logs, the state carried in metadata."""

import asyncio

import pytest

from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.errors import EnvironmentStepError
from nemo_gym.resources_servers.number_guess import game

ENV = NumberGuessEnvironment()


def _log(*guesses: str) -> list[dict[str, str]]:
    log = [{"role": "user", "content": game.instructions(1, 100)}]
    for i, guess in enumerate(guesses):
        if i:
            log.append({"role": "user", "content": "Higher."})
        log.append({"role": "assistant", "content": guess})
    return log


def test_one_move_per_sample_in_batch_order() -> None:
    infos = [{"secret": 42, "low": 1, "high": 100}, {"secret": 42, "low": 1, "high": 100},
             {"secret": 7, "low": 1, "high": 100, "guesses": [3], "dataset": "mine"},
             {"secret": 9, "low": 1, "high": 100}]
    logs = [_log("50"), _log("The answer is 42."), _log("3", "7"), _log("I am not sure.")]
    result = asyncio.run(ENV.step(logs, infos))
    assert [o["content"] for o in result.observations] == [
        "Lower.", "Correct! The number was 42.", "Correct! The number was 7.",
        "Invalid guess: answer with one integer between 1 and 100."]
    assert {o["role"] for o in result.observations} == {"user"}
    assert result.rewards.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert result.terminateds.tolist() == [False, True, True, False]
    assert result.answers == ["50", "42", "7", None]
    assert result.next_stop_strings == [None] * 4
    assert result.metadata[0] == {"secret": 42, "low": 1, "high": 100, "guesses": [50]}
    assert result.metadata[2] == {"secret": 7, "low": 1, "high": 100, "guesses": [3, 7], "dataset": "mine"}
    assert result.metadata[3]["guesses"] == [None]
    # The caller's state is not changed in place.
    assert infos[2]["guesses"] == [3] and "guesses" not in infos[0]


def test_metadata_carries_the_game_to_the_next_step() -> None:
    state = {"secret": 30, "low": 1, "high": 100}
    log: list[dict[str, str]] = [{"role": "user", "content": game.instructions()}]
    observations, total = [], 0.0
    for guess in ["50", "25", "30"]:
        log.append({"role": "assistant", "content": guess})
        result = asyncio.run(ENV.step([log], [state]))
        state, observation = result.metadata[0], result.observations[0]
        observations.append(observation["content"])
        total += float(result.rewards[0])
        log.append(observation)
    assert observations == ["Lower.", "Higher.", "Correct! The number was 30."]
    assert total == 1.0 and state["guesses"] == [50, 25, 30]
    with pytest.raises(EnvironmentStepError, match="sample 0: the game was already solved"):
        asyncio.run(ENV.step([log], [state]))


@pytest.mark.parametrize(
    "logs, infos, message",
    [([_log("5"), _log("5")], [{"secret": 5, "low": 1, "high": 9}, {"low": 1, "high": 9}], "sample 1: 'secret'"),
     ([_log("5")], [None], "sample 0: a game state must be a mapping"),
     ([[{"role": "user", "content": "go"}]], [{"secret": 5, "low": 1, "high": 9}], "sample 0: .*no assistant")],
)
def test_bad_samples_raise_naming_the_sample(logs: list, infos: list, message: str) -> None:
    with pytest.raises(EnvironmentStepError, match=message):
        asyncio.run(ENV.step(logs, infos))
