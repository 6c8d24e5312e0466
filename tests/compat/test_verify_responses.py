"""NeMo Gym's `/aggregate_metrics` body, `{"verify_responses": [...]}`, both ways: our resources servers (and the
agents that forward to them) answer it in NeMo Gym's shape; our aggregation sends it to a NeMo Gym head's agents."""

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from nemo_gym.compat.verify_responses import check_answer, strip_row, verify_responses_body
from nemo_gym.failures import RequestFailed
from nemo_gym.config.servers import ServerSpec
from nemo_gym.http_client import HttpClient
from nemo_gym.resources_servers.example_single_tool_call.app import ExampleSingleToolCall
from nemo_gym.rollout_collection.aggregate import aggregate_rollouts
from nemo_gym.server.client import ServerClient
from tests.compat.threaded import json_app, serving

NEMO_GYM_ANSWER_KEYS = {"agent_metrics", "key_metrics", "group_level_metrics"}


def _row(task: int, rollout: int, reward: float, agent: str = "a") -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent},
            "responses_create_params": {"input": "q" * 50}, "expected_city": "Paris", "reward": reward,
            "response": {"id": "r", "output": [{"type": "message", "content": "long transcript"}],
                         "usage": {"input_tokens": 3, "output_tokens": 4}}}


def test_our_resources_server_answers_verify_responses_in_nemo_gyms_shape() -> None:
    rows = [strip_row(_row(t, r, float((t + r) % 2))) for t in range(3) for r in range(2)]
    server = ExampleSingleToolCall(ServerSpec("weather", "resources_servers", "example_single_tool_call"))
    with TestClient(server.app()) as client:
        answer = client.post("/aggregate_metrics", json={"verify_responses": rows})
        bad = client.post("/aggregate_metrics", json={"verify_responses": {"not": "a list"}})
        empty = client.post("/aggregate_metrics", json={"verify_responses": []})
    assert answer.status_code == 200 and set(answer.json()) == NEMO_GYM_ANSWER_KEYS
    body = answer.json()
    assert body["agent_metrics"]["mean/reward"] == 0.5 and body["key_metrics"]["mean/reward"] == 0.5
    assert body["group_level_metrics"] == [{"_ng_task_index": t, "mean/reward": 0.5} for t in range(3)]
    assert bad.status_code == 400 and "'verify_responses' must be a list of objects" in bad.text
    assert empty.status_code == 200 and set(empty.json()) == NEMO_GYM_ANSWER_KEYS


def test_rows_are_stripped_as_nemo_gyms_collector_strips_them() -> None:
    stripped = strip_row(_row(0, 1, 1.0))
    assert stripped == {"_ng_task_index": 0, "_ng_rollout_index": 1, "agent_ref": {"name": "a"},
                        "expected_city": "Paris", "reward": 1.0,
                        "response": {"usage": {"input_tokens": 3, "output_tokens": 4}}}
    assert "response" not in strip_row({"reward": 0.0, "response": {"output": []}})


def test_the_body_streams_in_chunks_and_holds_only_the_chosen_rows() -> None:
    lines = [orjson.dumps(_row(t, 0, 1.0, agent="a" if t % 3 else "b")) for t in range(3000)]

    async def collect() -> list[bytes]:
        body = verify_responses_body(lambda: iter(lines), lambda r: r["agent_ref"]["name"] == "a")
        return [chunk async for chunk in body]

    chunks = asyncio.run(collect())
    assert len(chunks) > 1  # streamed, not built whole
    body = orjson.loads(b"".join(chunks))
    assert list(body) == ["verify_responses"]
    assert [r["_ng_task_index"] for r in body["verify_responses"]] == [t for t in range(3000) if t % 3]
    assert body["verify_responses"][0] == strip_row(orjson.loads(lines[1]))


def test_answers_that_break_nemo_gyms_format_are_refused() -> None:
    assert check_answer({"agent_metrics": {}, "key_metrics": {}, "group_level_metrics": []}, "u")
    with pytest.raises(RequestFailed, match="'group_level_metrics' of the /aggregate_metrics answer must"):
        check_answer({"group_level_metrics": {}}, "u")
    with pytest.raises(RequestFailed, match="did not answer /aggregate_metrics with a JSON object"):
        check_answer([1], "u")


def test_aggregation_against_a_nemo_gym_head_sends_verify_responses_and_keeps_its_answer(tmp_path: Path) -> None:
    # Keys are unique across agents; written out of order, aggregated in key order.
    rows = [_row(t + offset, r, float(t == 0), agent) for agent, offset in (("b", 2), ("a", 0)) for t in (1, 0)
            for r in (1, 0)]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    posted: list[Any] = []
    answer = {"agent_metrics": {"mean/reward": 0.5, "nemo_gym_only": 7.0}, "key_metrics": {"nemo_gym_only": 7.0},
              "group_level_metrics": [{"_ng_task_index": 0, "rollout_infos": ["x"]}]}
    with serving(json_app({"/aggregate_metrics": answer}, posted)) as agent_url:
        instances = [{"process_name": name, "server_type": "responses_api_agents", "name": "simple_agent",
                      "url": agent_url} for name in ("a", "b")]
        with serving(json_app({"/server_instances": instances})) as head_url:

            async def aggregate():
                http = HttpClient()
                try:
                    return await aggregate_rollouts([rollouts], tmp_path / "m_aggregate_metrics.json",
                                                    ServerClient(head_url, http))
                finally:
                    await http.aclose()

            result = asyncio.run(aggregate())
    assert [list(body) for body in posted] == [["verify_responses"], ["verify_responses"]]
    for agent, body in zip(("a", "b"), posted):
        expected = [strip_row(r) for r in sorted((r for r in rows if r["agent_ref"]["name"] == agent),
                                                 key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"]))]
        assert body["verify_responses"] == expected
    entries = orjson.loads(result.path.read_bytes())
    assert [e["agent_ref"]["name"] for e in entries] == ["a", "b"]
    for entry in entries:
        assert entry["key_metrics"] == {"nemo_gym_only": 7.0}
        assert entry["agent_metrics"]["nemo_gym_only"] == 7.0 and entry["agent_metrics"]["num_rollouts"] == 4
    groups = {g["_ng_task_index"]: g for g in entries[0]["group_level_metrics"]}
    assert groups[0]["rollout_infos"] == ["x"] and "rollout_infos" not in groups[1]
