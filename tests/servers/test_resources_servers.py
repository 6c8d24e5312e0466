"""The resources server base in-process: routes, tools, session state and /aggregate_metrics, and the generic
metrics every environment gets."""

import math
import random
from typing import Any

import pytest
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.protocol import SESSION_HEADER
from nemo_gym.resources_servers import ResourcesServer, tool
from nemo_gym.resources_servers.metrics import NumericStats, group_mean_reward, summarize
from tests.helpers.responses import response


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

        verified = client.post("/verify", json={"sid": "a", "k": "v", "response": response()}, headers=a).json()
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
