"""HumanEval end to end on the real vLLM: benchmarks/humaneval/config.yaml + configs/vllm_model.yaml in `ng_run`,
3 prepared problems collected with ng_collect_rollouts; each rollout is scored in the sandbox with its outcome."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.resources_servers.code_exec.outcomes import OUTCOMES
from tests.collection.util import read_rows, run_cli
from tests.helpers.stack import REPO_ROOT, running_stack


@pytest.mark.vllm
def test_humaneval_collects_three_problems(vllm_server, tmp_path: Path) -> None:
    data = tmp_path / "data"
    prepared = run_cli("prepare_benchmark", ["+benchmark=humaneval", f"+output_dir={data}", "+limit=3"], REPO_ROOT)
    assert prepared.returncode == 0, prepared.stderr
    configs = f"{REPO_ROOT}/benchmarks/humaneval/config.yaml,{REPO_ROOT}/configs/vllm_model.yaml"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    output = tmp_path / "out" / "humaneval.jsonl"
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path) as stack:
        collected = run_cli("collect", [
            "+agent_name=humaneval_simple_agent", f"+input_jsonl_fpath={data / 'humaneval.jsonl'}",
            f"+output_jsonl_fpath={output}", f"+head_server_url={stack.head_url}",
            "+responses_create_params.temperature=0.0",
        ], tmp_path, timeout=600)
        assert collected.returncode == 0, collected.stdout + collected.stderr
    rows = read_rows(output)
    assert sorted(row["task_id"] for row in rows) == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    for row in rows:
        print(f"\n{row['task_id']}: reward {row['reward']} {row['outcome']} ({row['completion_kind']}, "
              f"{row['duration_s']} s) {row['outcome_detail'][:80]}")
        assert row["reward"] in (0.0, 1.0) and row["outcome"] in OUTCOMES
        assert row["reward"] == (1.0 if row["outcome"] == "passed" else 0.0)
        assert row["sandboxed"] is True and row["response"]["output"]
    metrics = orjson.loads(output.with_name(f"{output.stem}_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_ref"]["name"] == "humaneval_simple_agent"
