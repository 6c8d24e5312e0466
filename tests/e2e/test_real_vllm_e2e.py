"""End to end against a real vLLM (CPU build) serving the bundled SmolLM2-135M-Instruct: real servers, real verifier.

The model is small: on 1-digit additions it is right about 3 times in 4 at temperature 0. Greedy decoding makes
that deterministic: the rows in `GREEDY_SOLVED` (tests/helpers/model.py) are the ones it answers correctly, so each must
come back with reward 1 through the whole path (prompt -> vLLM -> answer extraction -> math_verify).
"""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers.model import GREEDY_SOLVED
from tests.helpers.stack import REPO_ROOT, environment_config, free_port, running_stack

MATH_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"
GREEDY = ["+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=32"]


def _cli(module: str, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"from nemo_gym.cli.{module} import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


def _check_rollouts(output: Path, expected_rows: int) -> list[dict]:
    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert len(rows) == expected_rows
    keys = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows}
    assert len(keys) == expected_rows
    for row in rows:
        assert row["reward"] in (0.0, 1.0)
        assert row["response"]["object"] == "response" and row["response"]["output"]
        assert row["agent_ref"]["name"] == "math_simple_agent"
    missed = {r["_ng_task_index"]: r["response"]["output"] for r in rows
              if r["_ng_task_index"] in GREEDY_SOLVED and r["reward"] != 1.0}
    assert not missed, f"greedy answers the model gets right scored 0: {missed}"
    metrics = orjson.loads(output.with_name(f"{output.stem}_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_ref"]["name"] == "math_simple_agent"
    assert metrics[0]["agent_metrics"]["mean/reward"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
    return rows


@pytest.mark.vllm
def test_ng_run_math_stack_and_collect_rollouts(vllm_server, tmp_path: Path) -> None:
    configs = f"{environment_config('math')},{REPO_ROOT}/configs/vllm_model.yaml"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path) as stack:
        output = tmp_path / "out" / "math.jsonl"
        result = _cli("collect", [
            "+agent_name=math_simple_agent", f"+input_jsonl_fpath={MATH_ROWS}", f"+output_jsonl_fpath={output}",
            "+limit=24", "+num_samples_in_parallel=16", f"+head_server_url={stack.head_url}", *GREEDY,
        ], cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    _check_rollouts(output, expected_rows=24)


@pytest.mark.vllm
def test_readme_main_command_starts_vllm_and_collects(tmp_path: Path) -> None:
    """The README's one command for the embedded default: ng_run starts vLLM itself, then collects and stops."""
    output = tmp_path / "results" / "math_rollouts.jsonl"
    result = _cli("e2e", [
        f"+config_paths=[{environment_config('math')},configs/local_vllm_model.yaml]", "+split=example",
        f"+output_jsonl_fpath={output}", "+limit=20", f"+head_server.port={free_port()}",
        f"+log_dir={tmp_path / 'logs'}", *GREEDY,
    ], cwd=REPO_ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _check_rollouts(output, expected_rows=20)
