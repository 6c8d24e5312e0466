"""simple_agent in a real `ng_run` stack: the shipped weather and math configs, driven by scripted model servers."""

from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson
import pytest

from tests.helpers.stack import REPO_ROOT, Stack, environment_config, running_stack

SCRIPTED_MODEL = REPO_ROOT / "tests" / "helpers" / "scripted_model.py"
WEATHER_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "example_single_tool_call" / "data" / "example.jsonl"


def _model(mode: str) -> dict[str, Any]:
    return {"responses_api_models": {"scripted_model": {"entrypoint": str(SCRIPTED_MODEL), "mode": mode}}}


def _agent(model: str, **settings: Any) -> dict[str, Any]:
    return {
        "responses_api_agents": {
            "simple_agent": {
                "resources_server": {"type": "resources_servers", "name": "example_single_tool_call"},
                "model_server": {"type": "responses_api_models", "name": model},
                **settings,
            }
        }
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("agent_stack")
    extra = {
        "policy_model": _model("weather"),
        "bad_args_model": _model("bad_args"),
        "looping_model": _model("always_call"),
        "failing_model": _model("fail"),
        "bad_args_agent": _agent("bad_args_model"),
        "looping_agent": _agent("looping_model", max_steps=3),
        "failing_agent": _agent("failing_model"),
    }
    # JSON is valid YAML.
    (workdir / "test_servers.yaml").write_bytes(orjson.dumps(extra))
    paths = [environment_config("example_single_tool_call"), environment_config("math"),
             workdir / "test_servers.yaml"]
    with running_stack([f"+config_paths=[{','.join(map(str, paths))}]"], cwd=workdir) as running:
        yield running


def _post(stack: Stack, server: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{stack.url(server)}{path}", json=body, timeout=60, trust_env=False)


def _weather_rows() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in WEATHER_ROWS.read_bytes().splitlines()]


def _types(result: dict[str, Any]) -> list[str]:
    return [item["type"] for item in result["response"]["output"]]


def test_weather_rollouts_get_reward_1(stack: Stack) -> None:
    rows = _weather_rows()
    assert len(rows) >= 5
    sessions = set()
    for row in rows:
        reply = _post(stack, "example_single_tool_call_simple_agent", "/run", row)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert result["reward"] == 1.0
        assert result["expected_city"] == row["expected_city"]
        assert result["responses_create_params"] == row["responses_create_params"]
        assert _types(result) == ["function_call", "function_call_output", "message"]
        assert result["response"]["rollout_end"] == "terminated"  # answered without calls: the episode is over
        tool_output = orjson.loads(result["response"]["output"][1]["output"])
        assert tool_output["city"] == row["expected_city"] and tool_output["weather"]
        sessions.add(result["response"]["metadata"]["session_id"])
    assert len(sessions) == len(rows) and "" not in sessions and None not in sessions


def test_failing_model_gives_an_error_not_a_reward(stack: Stack) -> None:
    reply = _post(stack, "failing_agent", "/run", _weather_rows()[0])
    assert reply.status_code >= 500
    body = reply.json()
    assert body["error"]["failure_class"] == "http_5xx"
    assert "reward" not in body


def test_invalid_tool_arguments_go_back_to_the_model(stack: Stack) -> None:
    reply = _post(stack, "bad_args_agent", "/run", _weather_rows()[0])
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert _types(result) == ["function_call", "function_call_output", "message"]
    assert "not valid JSON" in result["response"]["output"][1]["output"]
    assert result["reward"] == 0.0


def test_max_steps_bounds_a_model_that_always_calls_tools(stack: Stack) -> None:
    reply = _post(stack, "looping_agent", "/run", _weather_rows()[0])
    assert reply.status_code == 200, reply.text
    assert _types(reply.json()) == ["function_call", "function_call_output"] * 3
    assert reply.json()["response"]["rollout_end"] == "max_turns"  # still calling tools when the limit came


@pytest.mark.parametrize("requested, calls", [(2, 2), (1, 1), (7, 3)])
def test_the_requests_max_rollout_turns_lowers_max_steps(stack: Stack, requested: int, calls: int) -> None:
    row = _weather_rows()[0]
    row["responses_create_params"] = {**row["responses_create_params"], "max_rollout_turns": requested}
    reply = _post(stack, "looping_agent", "/run", row)
    assert reply.status_code == 200, reply.text
    assert _types(reply.json()) == ["function_call", "function_call_output"] * calls


def test_a_bad_max_rollout_turns_is_a_400(stack: Stack) -> None:
    row = _weather_rows()[0]
    row["responses_create_params"] = {**row["responses_create_params"], "max_rollout_turns": 0}
    reply = _post(stack, "looping_agent", "/run", row)
    assert reply.status_code == 400 and "max_rollout_turns" in reply.json()["error"]["message"]


def test_v1_responses_runs_the_loop_without_verify(stack: Stack) -> None:
    params = _weather_rows()[1]["responses_create_params"]
    reply = _post(stack, "example_single_tool_call_simple_agent", "/v1/responses", params)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert "reward" not in response and response["object"] == "response"
    assert [item["type"] for item in response["output"]] == ["function_call", "function_call_output", "message"]


def test_undeclared_tool_is_refused_without_calling_it(stack: Stack) -> None:
    row = _weather_rows()[0]
    row["responses_create_params"] = {**row["responses_create_params"], "tools": []}
    result = _post(stack, "example_single_tool_call_simple_agent", "/run", row).json()
    assert "no tool named 'get_weather'" in result["response"]["output"][1]["output"]


def test_aggregate_metrics_is_forwarded_to_the_resources_server(stack: Stack) -> None:
    rows = [{"_ng_task_index": 0, "_ng_rollout_index": i, "reward": float(i % 2)} for i in range(4)]
    reply = _post(stack, "example_single_tool_call_simple_agent", "/aggregate_metrics", {"rows": rows})
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert result["key_metrics"] == {"mean/reward": 0.5}
    assert result["group_level_metrics"] == [{"_ng_task_index": 0, "mean/reward": 0.5}]
    # The agent forwards bytes as they arrive (a streamed body of 100k rows here) and passes errors through as-is.
    url = f"{stack.url('example_single_tool_call_simple_agent')}/aggregate_metrics"

    def chunks():
        yield b'{"rows":['
        yield b",".join(b'{"_ng_task_index":%d,"_ng_rollout_index":0,"reward":%d}' % (i, i % 4 == 0)
                        for i in range(100_000))
        yield b"]}"

    big = httpx.post(url, content=chunks(), headers={"content-type": "application/json"}, timeout=60,
                     trust_env=False)
    assert big.status_code == 200 and big.json()["key_metrics"]["mean/reward"] == pytest.approx(0.25)
    bad = httpx.post(url, json={}, trust_env=False)
    assert bad.status_code == 400 and "aggregate_metrics needs" in bad.json()["error"]["message"]


@pytest.mark.parametrize(
    "text, extracted, reward",
    [("23 + 45 = \\boxed{68}", "68", 1.0), ("It is 68.", "68", 1.0), ("It is 67.", "67", 0.0), ("No idea.", None, 0.0)],
)
def test_math_verify_over_http(stack: Stack, text: str, extracted: str | None, reward: float) -> None:
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    row = {"responses_create_params": {"input": "What is 23 + 45?"}, "expected_answer": "68"}
    reply = _post(stack, "math_resources_server", "/verify", {**row, "response": {"output": [message]}})
    assert reply.status_code == 200, reply.text
    assert (reply.json()["extracted_answer"], reply.json()["reward"]) == (extracted, reward)


@pytest.mark.vllm
def test_math_and_weather_agents_with_a_real_model(vllm_server, tmp_path: Path) -> None:
    """The shipped configs end to end: simple_agent -> vllm_model -> real vLLM, scored by the real verifiers."""
    paths = (environment_config("math"), environment_config("example_single_tool_call"),
             REPO_ROOT / "configs" / "vllm_model.yaml")
    configs = ",".join(map(str, paths))
    args = [f"+config_paths=[{configs}]", f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
            f"+policy_model_name={vllm_server.model}"]
    math_rows = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"
    with running_stack(args, cwd=tmp_path) as running:
        for line in math_rows.read_bytes().splitlines()[:3]:
            row = orjson.loads(line)
            row["responses_create_params"] |= {"temperature": 0.0, "max_output_tokens": 32}
            reply = _post(running, "math_simple_agent", "/run", row)
            assert reply.status_code == 200, reply.text
            result = reply.json()
            assert result["reward"] in (0.0, 1.0) and "extracted_answer" in result
            assert _types(result)[-1] == "message"
        row = _weather_rows()[0]
        row["responses_create_params"] |= {"temperature": 0.0, "max_output_tokens": 64}
        reply = _post(running, "example_single_tool_call_simple_agent", "/run", row)
        assert reply.status_code == 200, reply.text
        assert reply.json()["reward"] in (0.0, 1.0)
