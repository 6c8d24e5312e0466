"""The multiple-choice environment in-process: its verify, its per-position metrics, and its generated data."""

import asyncio
from collections import Counter
from pathlib import Path

import orjson
import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.resources_servers.multiple_choice.app import MultipleChoiceResourcesServer
from nemo_gym.resources_servers.multiple_choice.generate import KINDS, generate_rows
from nemo_gym.server.base import HandlerError
from tests.helpers.responses import message, response

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"
ROW = {"options": [{"A": "Paris"}, {"B": "Rome"}, {"C": "Oslo"}, {"D": "Lima"}], "expected_answer": "B"}


def _server() -> MultipleChoiceResourcesServer:
    return MultipleChoiceResourcesServer(ServerSpec("mc", "resources_servers", "multiple_choice"))


@pytest.mark.parametrize("text, reward, chosen", [
    ("Answer: B", 1.0, "B"), ("Rome", 1.0, "B"), ("A", 0.0, "A"), ("I am not sure.", 0.0, None),
])
def test_verify_scores_the_chosen_option(text: str, reward: float, chosen: str | None) -> None:
    result = asyncio.run(_server().verify(ROW, response(message("thinking..."), message(text))))
    assert result["reward"] == reward and result["extracted_answer"] == chosen


@pytest.mark.parametrize("row", [{**ROW, "expected_answer": "E"}, {**ROW, "options": {"A": "Paris"}},
                                 {"expected_answer": "A"}])
def test_a_malformed_row_is_a_400_naming_the_field(row: dict) -> None:
    with pytest.raises(HandlerError) as raised:
        asyncio.run(_server().verify(row, response(message("A"))))
    assert raised.value.status == 400 and ("options" in raised.value.message or "expected_answer" in raised.value.message)


def test_metrics_show_accuracy_by_position_and_how_often_each_position_is_chosen() -> None:
    # A model that always answers A: right only where A is right, and every choice is A.
    rows = [{"_ng_task_index": i, "_ng_rollout_index": 0, "expected_answer": "ABCD"[i % 4],
             "extracted_answer": "A", "reward": 1.0 if i % 4 == 0 else 0.0} for i in range(8)]
    rows.append({"_ng_task_index": 8, "_ng_rollout_index": 0, "expected_answer": "B", "extracted_answer": None,
                 "reward": 0.0})
    metrics = _server().compute_metrics(rows)
    assert metrics["expected_answer_A/mean_reward"] == 1.0 and metrics["expected_answer_B/mean_reward"] == 0.0
    assert metrics["expected_answer_B/num_rollouts"] == 3
    assert metrics["chosen_A/rate"] == 8 / 9 and metrics["chosen_none/rate"] == 1 / 9
    assert set(_server().key_metrics({**metrics, "mean/reward": 2 / 9})) >= {"mean/reward", "chosen_A/rate",
                                                                              "expected_answer_A/mean_reward"}


def test_generated_rows_are_right_by_construction_balanced_and_seeded() -> None:
    rows = generate_rows(40, seed=0)
    assert rows == generate_rows(40, seed=0) and rows != generate_rows(40, seed=1)
    assert Counter(row["expected_answer"] for row in rows) == {"A": 10, "B": 10, "C": 10, "D": 10}
    assert Counter(row["kind"] for row in rows) == {kind: 8 for kind in KINDS}
    for row in rows:
        options = dict(pair for option in row["options"] for pair in option.items())
        assert len(set(options.values())) == 4
        prompt = row["responses_create_params"]["input"][0]["content"]
        assert all(f"{letter}) {text}" in prompt for letter, text in options.items())
    sums = [row for row in rows if row["kind"] == "sum"]
    for row in sums:  # the one arithmetic kind: its right option is the true sum
        a, b = map(int, row["question"].removeprefix("What is ").rstrip("?").split(" + "))
        assert dict(pair for option in row["options"] for pair in option.items())[row["expected_answer"]] == str(a + b)


def test_the_shipped_example_is_the_generator_output() -> None:
    assert [orjson.loads(line) for line in EXAMPLE.read_bytes().splitlines()] == generate_rows(40, seed=0)
