"""End to end against a real vLLM (CPU build) serving the bundled SmolLM2-135M-Instruct: real servers, real verifier.

The model is small: on 1-digit additions it is right about 3 times in 4 at temperature 0. Greedy decoding makes
that deterministic: the rows in `GREEDY_SOLVED` (tests/helpers/model.py) are the ones it answers correctly, so each must
come back with reward 1 through the whole path (prompt -> vLLM -> answer extraction -> math_verify).
"""

import math
import re
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from nemo_gym.responses_api_models.stats_paths import ENGINE_LOAD_PATH

from tests.helpers.model import check_math_rollouts
from tests.helpers.stack import REPO_ROOT, environment_config, running_stack

MATH_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"
GREEDY = ["+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=32"]


def _cli(module: str, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"from nemo_gym.cli.{module} import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


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
    check_math_rollouts(output, expected_rows=24)


@pytest.mark.vllm
def test_the_automatic_level_starts_at_the_capacity_vllm_reports_and_follows_its_queue(
        vllm_server, tmp_path: Path) -> None:
    configs = f"{environment_config('math')},{REPO_ROOT}/configs/vllm_model.yaml"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    root = vllm_server.base_url.removesuffix("/v1")
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path) as stack:
        (load,) = httpx.get(f"{stack.url('policy_model')}{ENGINE_LOAD_PATH}", timeout=30,
                            trust_env=False).json()["replicas"]
        # vLLM's capacity by another path: its KV cache's blocks times their size, over the context it serves.
        labels = dict(re.findall(r'(\w+)="([^"]*)"', re.search(r"^vllm:cache_config_info\{(.*)\}", httpx.get(
            f"{root}/metrics", timeout=30, trust_env=False).text, re.M).group(1)))  # type: ignore[union-attr]
        max_model_len = httpx.get(f"{root}/v1/models", timeout=30, trust_env=False).json()["data"][0]["max_model_len"]
        capacity = int(labels["num_gpu_blocks"]) * int(labels["block_size"]) / max_model_len
        assert load["capacity"] == pytest.approx(capacity, abs=0.01) and load["running"] >= 0
        output = tmp_path / "level.jsonl"
        rollouts = 13 * 10  # more than one measuring round (knee.MIN_WINDOW): the level is vLLM's to say
        result = _cli("collect", [
            "+agent_name=math_simple_agent", f"+input_jsonl_fpath={MATH_ROWS}", f"+output_jsonl_fpath={output}",
            "+limit=13", "+num_repeats=10", f"+head_server_url={stack.head_url}",
            "+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=8",
        ], cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"from {math.floor(capacity)}: started at vLLM's capacity (vLLM: " in result.stdout + result.stderr
    assert len(output.read_bytes().splitlines()) == rollouts
    progress = orjson.loads((tmp_path / "level_progress.json").read_bytes())
    assert progress["engine"]["capacity"] == pytest.approx(capacity, abs=0.01) and progress["engine"]["replicas"] == 1
    assert progress["concurrency"]["reason"]
