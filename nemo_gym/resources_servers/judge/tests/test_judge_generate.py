"""The judge environment's generated questions: right by construction, every kind, seeded; the shipped example."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.resources_servers.judge.generate import KINDS, generate_rows, in_words

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"


def test_numbers_in_words() -> None:
    assert [in_words(n) for n in (0, 7, 13, 20, 42, 99)] == ["zero", "seven", "thirteen", "twenty", "forty-two",
                                                              "ninety-nine"]
    with pytest.raises(ValueError):
        in_words(100)


def test_rows_are_seeded_take_the_kinds_in_turn_and_hold_their_answers() -> None:
    rows = generate_rows(30, seed=0)
    assert rows == generate_rows(30, seed=0) and rows != generate_rows(30, seed=1)
    assert [row["kind"] for row in rows[:len(KINDS)]] == list(KINDS)
    for row in rows:
        assert row["question"] in row["responses_create_params"]["input"][0]["content"]
        if row["kind"] == "minutes":
            hours = int(row["question"].split(" in ")[1].split()[0])
            assert row["expected_answer"] == str(60 * hours)
        if row["kind"] == "product":
            a, b = map(int, row["question"].removeprefix("What is ").rstrip("?").split(" times "))
            assert row["expected_answer"] == str(a * b)


def test_the_shipped_example_is_the_generator_output() -> None:
    assert [orjson.loads(line) for line in EXAMPLE.read_bytes().splitlines()] == generate_rows(30, seed=0)
