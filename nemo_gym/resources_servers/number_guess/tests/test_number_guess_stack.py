"""multi_turn_agent + the number-guessing server in a real `ng_run` stack (number_guess/configs/number_guess.yaml), driven by a
scripted guessing model: whole games, the turn limit, a full context and a failing model."""

from typing import Any, Iterator

import httpx
import orjson
import pytest

from nemo_gym.protocol import SESSION_HEADER
from tests.helpers.stack import REPO_ROOT, Stack, environment_config, running_stack

GUESSING_MODEL = REPO_ROOT / "tests" / "helpers" / "guessing_model.py"
SCRIPTED_MODEL = REPO_ROOT / "tests" / "helpers" / "scripted_model.py"
GAMES = REPO_ROOT / "nemo_gym" / "resources_servers" / "number_guess" / "data" / "example.jsonl"
MAX_TURNS = 8  # nemo_gym/resources_servers/number_guess/configs/number_guess.yaml


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("number_guess_stack")
    extra = {
        "policy_model": {"responses_api_models": {"guessing_model": {"entrypoint": str(GUESSING_MODEL)}}},
        "failing_model": {"responses_api_models": {"scripted_model": {"entrypoint": str(SCRIPTED_MODEL),
                                                                      "mode": "fail"}}},
        "failing_agent": {"responses_api_agents": {"multi_turn_agent": {
            "resources_server": {"type": "resources_servers", "name": "number_guess_resources_server"},
            "model_server": {"type": "responses_api_models", "name": "failing_model"}}}},
    }
    (workdir / "test_servers.yaml").write_bytes(orjson.dumps(extra))  # JSON is valid YAML
    paths = f"{environment_config('number_guess')},{workdir / 'test_servers.yaml'}"
    with running_stack([f"+config_paths=[{paths}]"], cwd=workdir) as running:
        yield running


def _games() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in GAMES.read_bytes().splitlines()]


def _run(stack: Stack, row: dict[str, Any], agent: str = "number_guess_agent") -> httpx.Response:
    return httpx.post(f"{stack.url(agent)}/run", json=row, timeout=60, trust_env=False)


def _with_mode(row: dict[str, Any], mode: str) -> dict[str, Any]:
    return {**row, "responses_create_params": {**row["responses_create_params"], "metadata": {"mode": mode}}}


def _roles(result: dict[str, Any]) -> list[str]:
    return [item["role"] for item in result["response"]["output"]]


def _text(item: dict[str, Any]) -> str:
    return "".join(part["text"] for part in item["content"])


def test_bisecting_model_solves_every_game(stack: Stack) -> None:
    for row in _games():
        reply = _run(stack, row)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        turns = result["turns"]
        assert result["reward"] == 1.0 and result["solved"] is True and 1 <= turns <= 7
        assert result["secret"] == row["secret"] and result["invalid_guesses"] == 0
        assert _roles(result) == ["assistant", "user"] * turns
        output = result["response"]["output"]
        assert _text(output[-1]) == f"Correct! The number was {row['secret']}."
        assert result["response"]["rollout_end"] == "terminated"
        assert all(_text(item) in ("Higher.", "Lower.") for item in output[1:-1:2])


def test_create_params_reach_the_model_unchanged(stack: Stack) -> None:
    row = _games()[0]
    params = {**row["responses_create_params"], "temperature": 0.0, "return_token_id_information": True,
              "top_k": 5}
    result = _run(stack, {**row, "responses_create_params": params}).json()
    seen = orjson.loads(result["response"]["metadata"]["params"])
    assert seen == {key: value for key, value in params.items() if key != "input"}


def test_max_turns_ends_a_game_nobody_solves(stack: Stack) -> None:
    result = _run(stack, _with_mode(_games()[0], "ramble")).json()
    assert (result["reward"], result["solved"], result["turns"]) == (0.0, False, MAX_TURNS)
    assert result["invalid_guesses"] == MAX_TURNS
    assert _roles(result) == ["assistant", "user"] * MAX_TURNS
    assert result["response"]["rollout_end"] == "max_turns"


def test_a_full_context_ends_the_rollout(stack: Stack) -> None:
    row = _games()[1]
    assert row["secret"] != 50  # the first bisecting guess must not solve it
    result = _run(stack, _with_mode(row, "context_full")).json()
    assert result["turns"] == 1 and _roles(result) == ["assistant", "user"]
    assert result["response"]["status"] == "incomplete" and result["reward"] == 0.0
    assert result["response"]["rollout_end"] == "truncated"


def test_an_answer_cut_by_max_output_tokens_is_still_a_move(stack: Stack) -> None:
    result = _run(stack, _with_mode(_games()[1], "capped")).json()
    assert result["solved"] is True and result["turns"] > 1
    assert _roles(result) == ["assistant", "user"] * result["turns"]


def test_failing_model_gives_an_error_not_a_reward(stack: Stack) -> None:
    reply = _run(stack, _games()[0], agent="failing_agent")
    assert reply.status_code == 502
    body = reply.json()
    assert body["error"]["failure_class"] == "http_5xx" and "reward" not in body


def test_bad_row_is_refused_by_the_environment(stack: Stack) -> None:
    reply = _run(stack, {**_games()[0], "secret": 500})
    assert reply.status_code == 502 and reply.json()["error"]["failure_class"] == "http_4xx"
    assert "outside [1, 100]" in reply.json()["error"]["message"]


def test_aggregate_metrics_is_forwarded(stack: Stack) -> None:
    rows = [{"_ng_task_index": 0, "_ng_rollout_index": i, "reward": float(i % 2)} for i in range(4)]
    reply = httpx.post(f"{stack.url('number_guess_agent')}/aggregate_metrics", json={"rows": rows}, timeout=30,
                       trust_env=False)
    assert reply.status_code == 200 and reply.json()["key_metrics"] == {"mean/reward": 0.5}


def test_v1_responses_plays_a_seeded_session_without_verify(stack: Stack) -> None:
    row = _games()[2]
    headers = {SESSION_HEADER: "caller-seeded"}
    seeded = httpx.post(f"{stack.url('number_guess_resources_server')}/seed_session", json=row, headers=headers,
                        timeout=30, trust_env=False)
    assert seeded.status_code == 200, seeded.text
    url = f"{stack.url('number_guess_agent')}/v1/responses"
    response = httpx.post(url, json=row["responses_create_params"], headers=headers, timeout=60,
                          trust_env=False).json()
    assert "reward" not in response and response["object"] == "response"
    assert _text(response["output"][-1]) == f"Correct! The number was {row['secret']}."
    unseeded = httpx.post(url, json=row["responses_create_params"], timeout=60, trust_env=False)
    assert unseeded.status_code == 502 and "call /seed_session first" in unseeded.json()["error"]["message"]
