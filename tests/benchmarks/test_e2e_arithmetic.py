"""ng_e2e_collect_rollouts over the arithmetic benchmark through a real stack (ng_run's servers: math environment,
simple_agent, vllm_model) with a stub chat model that does only the first operation it reads, so levels 1-3 score
1 and level 4 (two steps) scores 0: per-dataset num_repeats and prompt_config, and per-level metrics."""

from pathlib import Path

import orjson
import yaml

from nemo_gym.server.supervisor import free_port, port_is_free
from tests.benchmarks.util import ARITHMETIC_AGENT, ARITHMETIC_DATA
from tests.collection.util import keys, read_rows, run_cli, sidecar
from tests.helpers.stack import REPO_ROOT

STUB = Path(__file__).parent / "apps" / "first_step_chat.py"
PREPARED = str(ARITHMETIC_DATA)
AGENT = ARITHMETIC_AGENT


def _write_configs(root: Path, stub_port: int, bare_repeats: int) -> None:
    datasets = [
        {"name": "arithmetic", "type": "benchmark", "jsonl_fpath": PREPARED, "num_repeats": 2},
        {"name": "arithmetic_prompted", "type": "benchmark", "jsonl_fpath": "bare.jsonl",
         "prompt_config": "prompt.yaml", "num_repeats": bare_repeats},
    ]
    tree = {"first_step_chat": {"responses_api_models": {"first_step_chat": {"entrypoint": str(STUB),
                                                                             "port": stub_port}}},
            AGENT: {"responses_api_agents": {"simple_agent": {"datasets": datasets}}}}
    (root / "run.yaml").write_text(yaml.safe_dump(tree))


def _e2e(root: Path, stub_port: int, *extra: str):
    configs = f"benchmarks/arithmetic/config.yaml,{REPO_ROOT}/configs/vllm_model.yaml,run.yaml"
    return run_cli("e2e", [
        f"+config_paths=[{configs}]", f"+policy_base_url=http://127.0.0.1:{stub_port}/v1", "+policy_api_key=EMPTY",
        "+policy_model_name=first-step", "+split=benchmark", "+output_jsonl_fpath=out/arithmetic.jsonl",
        "+num_repeats=1", f"+head_server.port={free_port()}", f"+log_dir={root / 'logs'}", *extra], root)


def test_benchmark_datasets_with_their_repeats_prompt_and_per_level_metrics(arithmetic_root: Path) -> None:
    stub_port = free_port()
    _write_configs(arithmetic_root, stub_port, bare_repeats=3)
    result = _e2e(arithmetic_root, stub_port)
    assert result.returncode == 0, result.stdout + result.stderr
    out = arithmetic_root / "out" / "arithmetic.jsonl"
    assert sorted(keys(out)) == [(t, r) for t in range(8) for r in range(2)] + [
        (t, r) for t in range(8, 16) for r in range(3)]
    rows = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(out)}
    assert rows[(0, 0)]["responses_create_params"]["input"][0]["content"] == (
        "What is 6 + 6? Answer with just the number.")
    assert rows[(8, 2)]["responses_create_params"]["input"] == [
        {"role": "system", "content": "You are a calculator."}, {"role": "user", "content": "Compute: What is 6 + 6?"}]
    assert all(row["reward"] == (0.0 if row["level"] == 4 else 1.0) for row in rows.values())

    (metrics,) = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert metrics["agent_ref"] == {"name": AGENT}
    for level in (1, 2, 3, 4):
        assert metrics["agent_metrics"][f"level_{level}/num_rollouts"] == 2 * 2 + 2 * 3
        assert metrics["key_metrics"][f"level_{level}/mean_reward"] == (0.0 if level == 4 else 1.0)
    assert metrics["agent_metrics"]["mean/reward"] == 0.75 and "all servers stopped" in result.stdout

    again = _e2e(arithmetic_root, stub_port, "+resume_from_cache=true")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "collecting 0 of 40 rollouts" in again.stdout

    _write_configs(arithmetic_root, stub_port, bare_repeats=4)  # a changed dataset entry is another run
    changed = _e2e(arithmetic_root, stub_port, "+resume_from_cache=true")
    assert changed.returncode == 2 and "refusing to resume" in changed.stderr and "input_sha256" in changed.stderr
    assert len(keys(out)) == 40 and port_is_free("127.0.0.1", stub_port)


def test_an_unprepared_benchmark_fails_before_any_server_starts(arithmetic_root: Path) -> None:
    Path(PREPARED).unlink()
    stub_port = free_port()
    _write_configs(arithmetic_root, stub_port, bare_repeats=3)
    result = _e2e(arithmetic_root, stub_port)
    assert result.returncode == 2
    assert "not found; run ng_prepare_benchmark +benchmark=arithmetic" in result.stderr
    assert not (arithmetic_root / "logs").exists() and not (arithmetic_root / "out").exists()
