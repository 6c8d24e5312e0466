"""The arithmetic benchmark end to end with the real model: ng_prepare_benchmark, then ng_e2e_collect_rollouts
with configs/vllm_model.yaml pointed at a real vLLM serving the bundled SmolLM2-135M-Instruct (greedy)."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.server.supervisor import free_port
from tests.benchmarks.util import ARITHMETIC_AGENT, copy_benchmark
from tests.collection.util import read_rows, run_cli, sidecar
from tests.helpers.stack import REPO_ROOT

PER_LEVEL = 4


@pytest.mark.vllm
def test_arithmetic_every_level_with_the_real_model(vllm_server, tmp_path: Path) -> None:
    copy_benchmark("arithmetic", tmp_path)
    prepared = run_cli("prepare_benchmark", ["+benchmark=arithmetic", f"+n={PER_LEVEL}"], tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    result = run_cli("e2e", [
        f"+config_paths=[benchmarks/arithmetic/config.yaml,{REPO_ROOT}/configs/vllm_model.yaml]",
        f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY", f"+policy_model_name={vllm_server.model}",
        "+split=benchmark", "+output_jsonl_fpath=out/arithmetic.jsonl", "+responses_create_params.temperature=0.0",
        "+num_samples_in_parallel=16", f"+head_server.port={free_port()}", f"+log_dir={tmp_path / 'logs'}",
    ], tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "out" / "arithmetic.jsonl"
    rows = read_rows(out)
    assert sorted(r["level"] for r in rows) == [level for level in (1, 2, 3, 4) for _ in range(PER_LEVEL)]
    assert all(r["response"]["output"] and r["reward"] in (0.0, 1.0) for r in rows)
    (metrics,) = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert metrics["agent_ref"]["name"] == ARITHMETIC_AGENT
    by_level = {level: metrics["key_metrics"][f"level_{level}/mean_reward"] for level in (1, 2, 3, 4)}
    for level, mean in by_level.items():
        expected = [r["reward"] for r in rows if r["level"] == level]
        assert mean == sum(expected) / len(expected)
    assert by_level[1] > 0, f"the model solved no one-digit addition: {by_level}"
