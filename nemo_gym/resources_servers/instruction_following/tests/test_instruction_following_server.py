"""The instruction-following environment in-process: all-or-nothing reward, the per-instruction breakdown through
the library's metrics, rows it refuses, its generated data, and long answers checked off the event loop within a
time limit."""

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from nemo_gym.compat.markers import ERROR_MESSAGE_KEY, FAILURE_CLASS_KEY
from nemo_gym.config.servers import ServerSpec
from nemo_gym.failures import FailureClass
from nemo_gym.metrics.accumulator import AgentAccumulator
from nemo_gym.resources_servers.instruction_following import app, checks
from nemo_gym.resources_servers.instruction_following.app import InstructionFollowingResourcesServer
from nemo_gym.resources_servers.instruction_following.generate import generate_rows
from nemo_gym.resources_servers.instruction_following.instructions import CONFLICTS, INSTRUCTIONS
from nemo_gym.server.base import HandlerError
from tests.helpers.responses import message, response

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"
ROW = {"instruction_id_list": ["punctuation:no_comma", "keywords:existence"],
       "kwargs": [{}, {"keywords": ["sea"], "relation": None}]}  # a null parameter counts as absent, as in IFEval


def _server() -> InstructionFollowingResourcesServer:
    return InstructionFollowingResourcesServer(ServerSpec("if", "resources_servers", "instruction_following"))


def _verify(row: dict, text: str) -> dict:
    return asyncio.run(_server().verify(row, response(message("draft, with commas"), message(text))))


@pytest.mark.parametrize("text, reward, follows", [
    ("The sea is calm.", 1.0, [True, True]),  # only the final message is the answer
    ("The sea, calm.", 0.0, [False, True]),
    ("The lake is calm.", 0.0, [True, False]),
    ("   ", 0.0, [False, False]),  # an empty answer follows nothing, not even "no commas"
])
def test_reward_is_all_or_nothing_with_a_breakdown(text: str, reward: float, follows: list[bool]) -> None:
    result = _verify(ROW, text)
    assert result["reward"] == reward and result["follow_instruction_list"] == follows
    assert result["num_instructions"] == 2 and result["num_followed"] == sum(follows)
    assert result["followed:punctuation:no_comma"] == float(follows[0])
    assert result["followed:keywords:existence"] == float(follows[1])


def test_a_kind_asked_twice_must_be_followed_both_times() -> None:
    row = {"instruction_id_list": ["keywords:existence", "keywords:existence"],
           "kwargs": [{"keywords": ["sea"]}, {"keywords": ["sky"]}]}
    result = _verify(row, "The sea.")
    assert result["follow_instruction_list"] == [True, False] and result["followed:keywords:existence"] == 0.0


@pytest.mark.parametrize("row, complaint", [
    ({"kwargs": []}, "instruction_id_list"),
    ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, "one object per entry"),
    ({"instruction_id_list": ["language:response_language"], "kwargs": [{}]}, "unknown instruction id"),
    ({"instruction_id_list": [{"id": "change_case:english_lowercase"}], "kwargs": [{}]}, "unknown instruction id"),
    ({"instruction_id_list": ["keywords:existence"], "kwargs": [{}]}, "missing ['keywords']"),
    ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{"num_words": 3}]}, "unknown ['num_words']"),
    ({"instruction_id_list": ["length_constraints:number_words"],
      "kwargs": [{"relation": "about", "num_words": 3}]}, "'relation' must be one of"),
    ({"instruction_id_list": ["length_constraints:number_words"],
      "kwargs": [{"relation": "at least", "num_words": "3"}]}, "'num_words' must be a whole number"),
])
def test_a_row_it_cannot_check_is_a_400_saying_why(row: dict, complaint: str) -> None:
    with pytest.raises(HandlerError) as raised:
        _verify(row, "text")
    assert raised.value.status == 400 and complaint in raised.value.message


def test_the_metrics_break_the_reward_down_by_instruction() -> None:
    rows = [ROW, ROW, {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}]
    texts = ["The sea is calm.", "The lake, calm.", "Calm."]
    accumulator = AgentAccumulator()
    try:
        for task, (row, text) in enumerate(zip(rows, texts)):
            accumulator.add({"_ng_task_index": task, "_ng_rollout_index": 0, **_verify(row, text)})
        metrics = accumulator.finish().agent_metrics
    finally:
        accumulator.close()
    key = _server().key_metrics(metrics)
    assert key["mean/reward"] == pytest.approx(2 / 3)
    assert key["mean/followed:punctuation:no_comma"] == pytest.approx(2 / 3)  # asked 3 times, followed twice
    assert key["mean/followed:keywords:existence"] == pytest.approx(1 / 2)  # asked twice, followed once
    assert key["instruction_level_accuracy"] == pytest.approx(3 / 5)


def test_generated_rows_ask_every_kind_never_two_that_conflict_and_are_seeded() -> None:
    rows = generate_rows(40, seed=0)
    assert rows == generate_rows(40, seed=0) and rows != generate_rows(40, seed=1)
    assert {i for row in rows for i in row["instruction_id_list"]} == set(INSTRUCTIONS)
    for row in rows:
        groups = [INSTRUCTIONS[i].group for i in row["instruction_id_list"]]
        assert 1 <= len(groups) <= 3 and len(set(groups)) == len(groups)
        assert not any(frozenset((a, b)) in CONFLICTS for a in groups for b in groups)
        assert row["prompt"] == row["responses_create_params"]["input"][0]["content"]
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"]):
            assert INSTRUCTIONS[instruction_id].say(**kwargs) in row["prompt"]


def test_the_shipped_example_is_the_generator_output() -> None:
    assert [orjson.loads(line) for line in EXAMPLE.read_bytes().splitlines()] == generate_rows(40, seed=0)


NO_COMMA = "punctuation:no_comma"
LONG_ANSWER = "word " * (app.INLINE_CHARS // 2)  # long enough to be checked in a thread
WAIT_S = 5.0  # the most a test waits for a check it holds: without the fix the held check holds the event loop


class HeldCheck:
    """The no-comma check, held on a long answer until the test releases it: a verification that takes long."""

    def __init__(self) -> None:
        self.entered, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, text: str) -> bool:
        if len(text) > app.INLINE_CHARS:
            self.entered.set()
            self.release.wait(WAIT_S)
            self.finished.set()
        return checks.no_comma(text)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldCheck:
    check = HeldCheck()
    monkeypatch.setitem(INSTRUCTIONS, NO_COMMA, dataclasses.replace(INSTRUCTIONS[NO_COMMA], check=check))
    return check


def _verify_body(row: dict, text: str) -> dict:
    return {**row, "response": response(message(text))}


def test_the_server_answers_another_request_while_a_long_answer_is_verified(held: HeldCheck) -> None:
    row = {"instruction_id_list": [NO_COMMA], "kwargs": [{}]}

    async def scenario() -> tuple[httpx.Response, bool, httpx.Response]:
        transport = httpx.ASGITransport(app=_server().app())
        async with httpx.AsyncClient(transport=transport, base_url="http://if") as client:
            long = asyncio.create_task(client.post("/verify", json=_verify_body(row, LONG_ANSWER)))
            deadline = time.monotonic() + WAIT_S
            while not held.entered.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            short = await client.post("/verify", json=_verify_body(ROW, "The sea is calm."))
            answered_while_held = held.entered.is_set() and not held.finished.is_set()
            held.release.set()
            return short, answered_while_held, await long

    short, answered_while_held, long = asyncio.run(scenario())
    assert answered_while_held, "the short verification waited for the long one"
    assert short.status_code == 200 and short.json()["reward"] == 1.0
    assert long.status_code == 200 and long.json()["reward"] == 1.0  # the long one is scored as ever once done


def test_a_verification_past_its_time_limit_fails_as_judge_error_never_reward_0(
        held: HeldCheck, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "VERIFY_TIMEOUT_S", 0.05)
    row = {"instruction_id_list": [NO_COMMA], "kwargs": [{}]}

    async def scenario() -> dict:
        try:
            return await _server().verify(row, response(message(LONG_ANSWER)))
        finally:
            held.release.set()  # let the worker thread end before the loop closes

    result = asyncio.run(scenario())
    assert held.entered.is_set()
    assert result[FAILURE_CLASS_KEY] == FailureClass.JUDGE_ERROR and "reward" not in result
    assert result[ERROR_MESSAGE_KEY].startswith(app.VERIFY_TIMEOUT) and result["verify_timeout"] is True
