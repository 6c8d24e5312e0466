"""A generated environment with the real model a user starts with: the bundled SmolLM2 on vLLM, through
configs/vllm_model.yaml, exactly as the generated README says to run it."""

from pathlib import Path

import orjson
import pytest

from tests.helpers.stack import REPO_ROOT, running_stack
from tests.scaffold.util import init_environment, ng


@pytest.mark.vllm
def test_generated_environment_collects_with_real_vllm(vllm_server, tmp_path: Path) -> None:
    init_environment(tmp_path, "+name=my_env")
    env = "resources_servers/my_env"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    with running_stack([f"+config_paths=[{env}/configs/my_env.yaml,{REPO_ROOT}/configs/vllm_model.yaml]", *model],
                       cwd=tmp_path) as stack:
        result = ng("collect", ["+agent_name=my_env_simple_agent", f"+input_jsonl_fpath={env}/data/example.jsonl",
                                "+output_jsonl_fpath=results/my_env.jsonl", f"+head_server_url={stack.head_url}",
                                "+responses_create_params.temperature=0.0",
                                "+responses_create_params.max_output_tokens=64"], cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    rollouts = [orjson.loads(line) for line in (tmp_path / "results" / "my_env.jsonl").read_bytes().splitlines()]
    assert sorted(r["_ng_task_index"] for r in rollouts) == list(range(5))
    for rollout in rollouts:
        assert rollout["response"]["object"] == "response" and rollout["response"]["output"]
        # The reward follows the rule: 1.0 exactly when the tool was called and the count is right.
        expected = rollout["called_tool"] and rollout["extracted_answer"] == rollout["expected_answer"]
        assert rollout["reward"] == (1.0 if expected else 0.0)
