"""Resources servers in-process: the base's routes and session state, the math and weather verifiers, the metrics
and the arithmetic generator."""

import asyncio
import math
import random
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.protocol import SESSION_HEADER
from nemo_gym.resources_servers import ResourcesServer, tool
from nemo_gym.resources_servers.example_single_tool_call.app import ExampleSingleToolCall
from nemo_gym.resources_servers.math import app as math_app, verifier
from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows, main as generate_main
from nemo_gym.resources_servers.metrics import NumericStats, group_mean_reward, summarize


def _response(*items: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "output": list(items)}


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _call(arguments: str, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function_call", "call_id": "call_1", "name": name, "arguments": arguments}


# ---- math ----


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So the total is \\boxed{68}.", "68"),
        ("First \\boxed{3}, corrected: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("23 + 45 = 68", "68"),
        ("It costs 1,250 dollars, or -3.5 per day.", "-3.5"),
        ("\\boxed{12 unclosed, so the last number: 7", "7"),
        ("I do not know.", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert verifier.extract_answer(text) == expected


@pytest.mark.parametrize(
    "predicted, expected, match",
    [("68", "68", True), ("0.5", "1/2", True), ("\\frac{1}{2}", "0.5", True), ("1,000", "1000", True),
     ("67", "68", False), ("-68", "68", False)],
)
def test_answers_match(predicted: str, expected: str, match: bool) -> None:
    assert verifier.answers_match(predicted, expected) is match


def test_answers_match_falls_back_to_numbers_when_math_verify_cannot_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier, "parse", lambda text: [])
    assert verifier.answers_match("1,000.0", "1000")
    assert not verifier.answers_match("999", "1000")
    assert not verifier.answers_match("x", "1000")


def test_final_message_text_uses_the_last_message_only() -> None:
    response = _response(_message("draft: 12"), _call('{"city": "Paris"}'), _message("final: \\boxed{13}"))
    assert math_app.final_message_text(response) == "final: \\boxed{13}"
    assert verifier.extract_answer(math_app.final_message_text(response)) == "13"
    assert math_app.final_message_text(_response(_call("{}"))) == ""


# ---- weather ----


def _weather_server() -> ExampleSingleToolCall:
    return ExampleSingleToolCall(ServerSpec("weather", "resources_servers", "example_single_tool_call"))


@pytest.mark.parametrize(
    "items, reward",
    [
        ([_call('{"city": "paris "}'), _message("Rainy.")], 1.0),
        ([_call('{"city": "Lyon"}'), _call('{"city": "Paris"}')], 1.0),
        ([_call('{"city": "Lyon"}')], 0.0),
        ([_call('{"city": "Paris"}', name="get_time")], 0.0),
        ([_call("{city: Paris")], 0.0),
        ([_message("It is sunny in Paris.")], 0.0),
    ],
)
def test_weather_verify(items: list[dict[str, Any]], reward: float) -> None:
    row = {"expected_city": "Paris"}
    assert asyncio.run(_weather_server().verify(row, _response(*items)))["reward"] == reward


def test_weather_tool_is_canned_and_case_insensitive() -> None:
    server = _weather_server()
    assert asyncio.run(server.get_weather("PARIS"))["weather"] == asyncio.run(server.get_weather("paris"))["weather"]
    assert "weather" in asyncio.run(server.get_weather("Atlantis"))


# ---- base server routes ----


class Counter(ResourcesServer):
    """A stateful environment: `add` accumulates per rollout; the reward is the total."""

    @tool
    async def add(self, amount: int, *, session_id: str) -> dict[str, int]:
        state = self.session_state(session_id)
        state["total"] = state.get("total", 0) + amount
        return {"total": state["total"]}

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        return {"reward": float(self.session_state(row["sid"]).get("total", 0)), "checked": True}


def test_base_routes_tools_sessions_and_verify() -> None:
    server = Counter(ServerSpec("counter", "resources_servers", "counter"))
    with TestClient(server.app()) as client:
        a, b = {SESSION_HEADER: "a"}, {SESSION_HEADER: "b"}
        assert client.post("/seed_session", json={"x": 1}, headers=a).json() == {}
        assert client.post("/add", json={"amount": 2}, headers=a).json() == {"total": 2}
        assert client.post("/add", json={"amount": 3}, headers=a).json() == {"total": 5}
        assert client.post("/add", json={"amount": 1}, headers=b).json() == {"total": 1}
        bad = client.post("/add", json={"amount": 1, "extra": 2}, headers=a)
        assert bad.status_code == 400 and "invalid arguments" in bad.json()["error"]["message"]
        assert client.post("/add", json={"amount": 1, "session_id": "b"}, headers=a).status_code == 400
        assert client.post("/add", json=[1], headers=a).status_code == 400

        verified = client.post("/verify", json={"sid": "a", "k": "v", "response": _response()}, headers=a).json()
        assert verified["reward"] == 5.0 and verified["checked"] is True and verified["k"] == "v"
        assert "response" in verified
        # a's state went with its verify; b's is untouched.
        assert client.post("/add", json={"amount": 1}, headers=a).json() == {"total": 1}
        assert client.post("/add", json={"amount": 1}, headers=b).json() == {"total": 2}
        assert client.post("/verify", json={"sid": "a"}, headers=a).status_code == 400


def test_session_state_expires_when_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Counter(ServerSpec("counter", "resources_servers", "counter", {"session_ttl_s": 10}))
    now = [1000.0]
    monkeypatch.setattr("nemo_gym.resources_servers.base.time.monotonic", lambda: now[0])
    server.session_state("old")["v"] = 1
    now[0] += 11
    server.session_state("new")["v"] = 2
    assert server.session_state("old") == {} and server.session_state("new") == {"v": 2}


def test_tool_names_cannot_shadow_builtin_routes() -> None:
    class Bad(ResourcesServer):
        @tool
        async def verify(self, row: dict, response: dict) -> dict:
            return {"reward": 1.0}

    with pytest.raises(ValueError, match="clashes"):
        Bad(ServerSpec("bad", "resources_servers", "bad")).routes()


def test_aggregate_metrics_route() -> None:
    rows = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "ok": True, "name": "x"},
        {"_ng_task_index": 0, "_ng_rollout_index": 1, "reward": 0.0, "ok": False},
        {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0, "ok": True},
    ]
    with TestClient(Counter(ServerSpec("counter", "resources_servers", "counter")).app()) as client:
        result = client.post("/aggregate_metrics", json={"rows": rows}).json()
        assert client.post("/aggregate_metrics", json={}).status_code == 400
    assert result["key_metrics"] == {"mean/reward": pytest.approx(2 / 3)}
    assert result["agent_metrics"]["mean/ok"] == pytest.approx(2 / 3)
    assert not any("_ng_" in key or "name" in key for key in result["agent_metrics"])
    assert result["group_level_metrics"] == [
        {"_ng_task_index": 0, "mean/reward": 0.5},
        {"_ng_task_index": 1, "mean/reward": 1.0},
    ]


# ---- metrics ----


def test_summarize_stats() -> None:
    rows = [{"reward": 1, "len": 10}, {"reward": 0.0, "len": 20}, {"reward": 1.0, "len": 30, "bad": math.nan}]
    metrics = summarize(rows)
    assert metrics["mean/reward"] == pytest.approx(2 / 3)
    assert metrics["std/len"] == pytest.approx(10.0)  # sample std, as NeMo Gym
    assert (metrics["min/len"], metrics["max/len"]) == (10, 30)
    assert not any(key.endswith("/bad") for key in metrics)
    assert summarize([]) == {}


def test_stats_merge_equals_stats_of_the_union_and_stay_precise() -> None:
    rng = random.Random(1)
    values = [1e9 + rng.random() for _ in range(1000)]
    left, right, whole = NumericStats(), NumericStats(), NumericStats()
    for i, value in enumerate(values):
        (left if i < 300 else right).add_row({"x": value})
        whole.add_row({"x": value})
    left.merge(right)
    merged, expected = left.as_metrics(), whole.as_metrics()
    mean = sum(values) / len(values)
    exact_std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    for key in expected:
        assert merged[key] == pytest.approx(expected[key], rel=1e-6)
    assert expected["std/x"] == pytest.approx(exact_std, rel=1e-6)


def test_group_mean_reward_skips_rows_without_task() -> None:
    rows = [{"_ng_task_index": 2, "reward": 1}, {"reward": 1}, {"_ng_task_index": 2, "reward": 0}]
    assert group_mean_reward(rows) == [{"_ng_task_index": 2, "mean/reward": 0.5}]


# ---- arithmetic generator ----


def test_generator_is_deterministic_per_seed_and_correct(tmp_path) -> None:
    rows = generate_rows(20, seed=0, digits=2)
    assert rows == generate_rows(20, seed=0, digits=2) and rows != generate_rows(20, seed=1, digits=2)
    for row in rows:
        prompt = row["responses_create_params"]["input"][0]["content"]
        a, b = (int(n) for n in prompt.removeprefix("What is ").split("?")[0].split(" + "))
        assert 10 <= a <= 99 and 10 <= b <= 99 and row["expected_answer"] == str(a + b)
    out = tmp_path / "sub" / "rows.jsonl"
    generate_main(["--n", "20", "--seed", "0", "--digits", "2", "--out", str(out)])
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == rows
    single = generate_rows(30, seed=3)
    assert all(int(r["expected_answer"]) <= 18 for r in single)


def test_shipped_arithmetic_example_is_seed_0() -> None:
    shipped = math_app.__file__.replace("app.py", "data/arithmetic_example.jsonl")
    with open(shipped, "rb") as f:
        assert [orjson.loads(line) for line in f] == generate_rows(50, seed=0)
