"""Environments add metrics through the resources server hooks, on top of the library's metrics."""

from typing import Any

from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.resources_servers.base import ResourcesServer

ROWS = [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": float(r), "category": "ab"[t % 2]}
        for t in range(3) for r in range(2)]
LIBRARY = {"mean/reward": 0.5, "pass@1": 0.5, "pass@2": 1.0, "pass@1[avg-of-2]": 0.5}


class Plain(ResourcesServer):
    async def verify(self, row: dict, response: dict) -> dict:
        return {"reward": 0.0}


class ByCategory(Plain):
    def compute_metrics(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        rewards = [r["reward"] for r in rows if r["category"] == "a"]
        return {"mean/reward/category=a": sum(rewards) / len(rewards)}

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        return {"mean/reward/category=a": agent_metrics["mean/reward/category=a"], "pass@2": agent_metrics["pass@2"]}


def _post(server: ResourcesServer, body: dict) -> dict:
    with TestClient(server.app()) as client:
        return client.post("/aggregate_metrics", json=body).json()


def test_default_hooks_keep_the_library_metrics_and_pick_a_headline() -> None:
    answer = _post(Plain(ServerSpec("p", "resources_servers", "p")), {"rows": ROWS, "agent_metrics": LIBRARY})
    assert answer["agent_metrics"] == LIBRARY and answer["group_level_metrics"] == []
    assert answer["key_metrics"] == {"mean/reward": 0.5, "pass@1[avg-of-2]": 0.5, "pass@2": 1.0}


def test_an_environment_adds_its_own_metrics_and_key_metrics() -> None:
    answer = _post(ByCategory(ServerSpec("c", "resources_servers", "c")), {"rows": ROWS, "agent_metrics": LIBRARY})
    assert answer["agent_metrics"] == {**LIBRARY, "mean/reward/category=a": 0.5}
    assert answer["key_metrics"] == {"mean/reward/category=a": 0.5, "pass@2": 1.0}


def test_the_collector_sends_rows_only_to_an_environment_that_asks_for_them() -> None:
    plain = _post(Plain(ServerSpec("p", "resources_servers", "p")), {"agent_metrics": LIBRARY})
    assert "needs_rows" not in plain and plain["agent_metrics"] == LIBRARY
    assert plain["key_metrics"]["mean/reward"] == 0.5
    by_category = ByCategory(ServerSpec("c", "resources_servers", "c"))
    assert _post(by_category, {"agent_metrics": LIBRARY}) == {"needs_rows": True}
    with TestClient(by_category.app()) as client:
        assert client.post("/aggregate_metrics", json={}).status_code == 400
        assert client.post("/aggregate_metrics", json={"agent_metrics": LIBRARY, "rows": "x"}).status_code == 400
