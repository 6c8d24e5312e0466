"""The number-guessing game's rules (game.py) and its seeded row generator."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.resources_servers.number_guess import game
from nemo_gym.resources_servers.number_guess.generate import generate_rows, main as generate_main

EXAMPLE = Path(game.__file__).parent / "data" / "example.jsonl"


@pytest.mark.parametrize(
    "text, guess",
    [("50", 50), ("The answer is 42.", 42), ("Maybe 10, no, 37", 37), ("between 50-60", 60), ("-5", -5),
     ("I think 7.0", 7), ("3.5", None), ("no idea", None), ("", None)],
)
def test_parse_guess_takes_the_last_whole_number(text: str, guess: int | None) -> None:
    assert game.parse_guess(text) == guess


def test_higher_lower_correct_and_rewards() -> None:
    state = game.game_state({"secret": 42, "low": 1, "high": 100})
    assert state["guesses"] == []
    low = game.play_turn(state, "My guess is 10.")
    assert (low.guess, low.observation, low.reward, low.terminated) == (10, "Higher.", 0.0, False)
    high = game.play_turn(low.state, "70")
    assert (high.observation, high.reward, high.terminated) == ("Lower.", 0.0, False)
    right = game.play_turn(high.state, "Is it 42?")
    assert (right.observation, right.reward, right.terminated) == ("Correct! The number was 42.", 1.0, True)
    assert right.state["guesses"] == [10, 70, 42] and game.is_solved(right.state)
    # The input state is never changed: a state can be replayed.
    assert state["guesses"] == [] and low.state["guesses"] == [10]
    with pytest.raises(game.GameOverError, match="already solved"):
        game.play_turn(right.state, "42")


@pytest.mark.parametrize("text", ["no number here", "101", "0", "-3", "4.5"])
def test_invalid_moves_cost_a_turn_and_score_nothing(text: str) -> None:
    turn = game.play_turn(game.game_state({"secret": 5, "low": 1, "high": 100}), text)
    assert turn.guess is None and turn.reward == 0.0 and not turn.terminated
    assert turn.observation == "Invalid guess: answer with one integer between 1 and 100."
    assert turn.state["guesses"] == [None] and not game.is_solved(turn.state)


def test_total_reward_of_any_game_is_in_0_1() -> None:
    state = game.game_state({"secret": 3, "low": 1, "high": 4})
    total = 0.0
    for text in ["1", "x", "1", "2", "4", "3"]:
        turn = game.play_turn(state, text)
        total, state = total + turn.reward, turn.state
        if turn.terminated:
            break
    assert total == 1.0 and state["guesses"] == [1, None, 1, 2, 4, 3]


@pytest.mark.parametrize(
    "data, message",
    [({"low": 1, "high": 9}, "'secret' must be an integer"), ({"secret": "5", "low": 1, "high": 9}, "'secret'"),
     ({"secret": True, "low": 1, "high": 9}, "'secret'"), ({"secret": 10, "low": 1, "high": 9}, r"outside \[1, 9\]"),
     ({"secret": 5, "low": 1, "high": 9, "guesses": [1.5]}, "'guesses'"), (None, "must be a mapping")],
)
def test_invalid_states_are_refused(data: object, message: str) -> None:
    with pytest.raises(game.InvalidGameError, match=message):
        game.game_state(data)


def test_instructions_name_the_range() -> None:
    assert "from 3 to 17" in game.instructions(3, 17)
    assert game.instructions() == game.instructions(game.DEFAULT_LOW, game.DEFAULT_HIGH)


def test_generator_is_deterministic_by_seed(tmp_path: Path) -> None:
    rows = generate_rows(30, seed=5, low=10, high=20)
    assert rows == generate_rows(30, seed=5, low=10, high=20)
    assert rows != generate_rows(30, seed=6, low=10, high=20)
    assert {row["secret"] for row in rows} <= set(range(10, 21)) and len({row["secret"] for row in rows}) > 3
    for row in rows:
        assert row["responses_create_params"]["input"] == [{"role": "user", "content": game.instructions(10, 20)}]
        assert game.game_state(row)["secret"] == row["secret"]
    out = tmp_path / "sub" / "games.jsonl"
    generate_main(["--n", "30", "--seed", "5", "--low", "10", "--high", "20", "--out", str(out)])
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == rows
    with pytest.raises(SystemExit):
        generate_main(["--low", "5", "--high", "4"])


def test_shipped_example_is_seed_0() -> None:
    assert [orjson.loads(line) for line in EXAMPLE.read_bytes().splitlines()] == generate_rows(20, seed=0)
