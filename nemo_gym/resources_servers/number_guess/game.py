"""The number-guessing game: its rules, in one place, for every way it is played.

A game has a secret integer in [low, high]. Each turn the player's message is one move: its guess is the last number
in the text. A message without a number, with a number that is not whole, or with one outside [low, high] is an
invalid move. Each move is answered by a short user message: "Higher." / "Lower." / "Correct! The number was 42." /
"Invalid guess: answer with one integer between 1 and 100.". The game ends when the secret is guessed.

Rewards: 1.0 for the move that guesses the secret, 0.0 for every other move (invalid ones included). The game ends
at the correct guess, so a game's total reward is 1.0 when it is solved and 0.0 otherwise: always in [0, 1]. How many
moves a player gets is not a rule of the game but a setting of whoever drives it (an agent's `max_turns`, a
rollout's `max_rollout_turns`).

The state is a plain JSON-compatible dict `{secret, low, high, guesses}` (`guesses`: every move's guess, None for an
invalid one), so it travels unchanged as NeMo RL's `extra_env_info`, in input rows and in a server's session.
Played by `nemo_gym.experience.environments.number_guess` (in a trainer) and by this folder's `app.py` (served).
"""

import re
from dataclasses import dataclass
from typing import Any, Mapping, NotRequired, TypedDict

DEFAULT_LOW = 1
DEFAULT_HIGH = 100
CORRECT_REWARD = 1.0
# A minus sign only when it cannot be a range dash: "50-60" is 50 then 60, "-5" is minus five.
_NUMBER = re.compile(r"(?<![\d.])-?\d+(?:\.\d+)?")


class GameState(TypedDict):
    secret: int
    low: int
    high: int
    guesses: NotRequired[list[int | None]]


class InvalidGameError(ValueError):
    """A game state (or the input row it comes from) breaks the rules: missing fields, secret outside the range."""


class GameOverError(ValueError):
    """A move was made in a game that has already been solved."""


@dataclass(frozen=True)
class Turn:
    """The outcome of one move: what the player is told, its reward and the state after it."""

    guess: int | None  # None for an invalid move
    observation: str
    reward: float
    terminated: bool
    state: GameState


def instructions(low: int = DEFAULT_LOW, high: int = DEFAULT_HIGH) -> str:
    """The game's opening user message.

    Worded for small models: SmolLM2-135M answers this phrasing with a number ("The answer is 1.") and walks up on
    "Higher.", where longer rule descriptions make it chat about the game instead of guessing.
    """
    return f"I picked a number from {low} to {high}. What is your guess? Answer with one number."


def invalid_move_message(low: int, high: int) -> str:
    return f"Invalid guess: answer with one integer between {low} and {high}."


def parse_guess(text: str) -> int | None:
    """The last number in `text` if it is a whole number, else None."""
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    value = float(numbers[-1])
    return int(value) if value.is_integer() else None


def _whole(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    # bool is an int subclass, and True is not a number anyone means.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidGameError(f"'{key}' must be an integer, got {value!r}")
    return value


def game_state(data: Mapping[str, Any] | None) -> GameState:
    """The validated game state held in `data` (an input row or an earlier state); `guesses` defaults to none."""
    if not isinstance(data, Mapping):
        raise InvalidGameError(f"a game state must be a mapping with secret, low and high, got {type(data).__name__}")
    secret, low, high = _whole(data, "secret"), _whole(data, "low"), _whole(data, "high")
    if not low <= secret <= high:
        raise InvalidGameError(f"the secret {secret} is outside [{low}, {high}]")
    guesses = data.get("guesses", [])
    if not isinstance(guesses, list) or not all(g is None or isinstance(g, int) for g in guesses):
        raise InvalidGameError(f"'guesses' must be a list of integers or nulls, got {guesses!r}")
    return {"secret": secret, "low": low, "high": high, "guesses": list(guesses)}


def is_solved(state: GameState) -> bool:
    return state["secret"] in state.get("guesses", [])


def play_turn(state: GameState, text: str) -> Turn:
    """Play the move in `text` on `state` (left unchanged); the returned Turn holds the new state."""
    if is_solved(state):
        raise GameOverError(f"the game was already solved (the number was {state['secret']})")
    secret, low, high = state["secret"], state["low"], state["high"]
    guess = parse_guess(text)
    if guess is not None and not low <= guess <= high:
        guess = None
    new_state: GameState = {**state, "guesses": [*state.get("guesses", []), guess]}
    if guess is None:
        return Turn(None, invalid_move_message(low, high), 0.0, False, new_state)
    if guess == secret:
        return Turn(guess, f"Correct! The number was {secret}.", CORRECT_REWARD, True, new_state)
    return Turn(guess, "Higher." if secret > guess else "Lower.", 0.0, False, new_state)
