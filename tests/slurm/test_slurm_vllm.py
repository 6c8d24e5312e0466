"""Real Slurm with the real model: tasks pointed at one shared vLLM, and a task that starts its own vLLM."""

import re
import socket
from pathlib import Path

import orjson
import pytest

from nemo_gym.protocol import output_text
from tests.helpers.model import GREEDY_SOLVED, MODEL_DIR, VLLMServer
from tests.slurm.util import CONFIGS, MATH_CONFIG, assert_merged_metrics, job_ids, make_workdir, submit, wait_for_jobs

pytestmark = pytest.mark.vllm

COMMON = [
    "+agent_name=math_simple_agent", "+input_jsonl_fpath=input.jsonl", "+num_repeats=1",
    "+num_samples_in_parallel=8", "+responses_create_params.max_output_tokens=32", "+run_dir=run",
    "+responses_create_params.temperature=0.0",
]


def _assert_real_answers(run: Path, expected: int) -> None:
    """Every rollout once, with a model answer; reward 1 on the rows the model solves greedily; metrics that agree."""
    rows = [orjson.loads(line) for line in (run / "rollouts.jsonl").read_bytes().splitlines()]
    assert len({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows}) == len(rows) == expected
    assert all(r["reward"] in (0.0, 1.0) for r in rows)
    assert all(output_text(r["response"]).strip() for r in rows), "every rollout has a model answer"
    missed = {r["_ng_task_index"]: output_text(r["response"]) for r in rows
              if r["_ng_task_index"] in GREEDY_SOLVED and r["reward"] != 1.0}
    assert not missed, f"greedy answers the model gets right scored 0: {missed}"
    assert_merged_metrics(run, tasks=expected, repeats=1)


def test_two_tasks_share_one_vllm_server(vllm_server: VLLMServer, tmp_path: Path, slurm_jobs: set[str]) -> None:
    work = make_workdir(tmp_path, vllm_server.base_url, vllm_server.model, rows=20)
    config_paths = f"+config_paths=[{MATH_CONFIG},{CONFIGS / 'vllm_model.yaml'}]"
    record = submit(slurm_jobs, work, *COMMON, config_paths, "+num_shards=2")
    wait_for_jobs(job_ids(record), work / "run" / "logs", timeout_s=300)
    _assert_real_answers(work / "run", expected=20)


def test_task_starts_and_stops_its_own_vllm(tmp_path: Path, slurm_jobs: set[str]) -> None:
    if not (MODEL_DIR / "config.json").is_file():
        pytest.fail(f"model not prepared at {MODEL_DIR}: run `bash scripts/setup.sh`")
    work = make_workdir(tmp_path, "unused", "unused", rows=4)
    record = submit(
        slurm_jobs, work, *COMMON, "+num_shards=1", "+slurm.cpus_per_task=2", "+slurm.startup_timeout_s=900",
        f"+config_paths=[{MATH_CONFIG},{CONFIGS / 'local_vllm_model.yaml'}]",
        f"+policy_model.responses_api_models.local_vllm_model.model_path={MODEL_DIR}",
        # float32 on every CPU kind: GREEDY_SOLVED holds for float32 greedy answers (tests/helpers/model.py)
        "+policy_model.responses_api_models.local_vllm_model.dtype=float32",
        f"+slurm.aggregate_config_paths=[{MATH_CONFIG},{CONFIGS / 'slurm_aggregate_model.yaml'}]",
    )
    run = work / "run"
    wait_for_jobs(job_ids(record), run / "logs", timeout_s=720)
    _assert_real_answers(run, expected=4)

    (model_log,) = run.glob("logs/shard0/*/servers/policy_model.log")
    port = int(re.search(r"starting vLLM: .*--port (\d+)", model_log.read_text()).group(1))
    assert "vLLM ready" in model_log.read_text()
    with pytest.raises(OSError):  # the task's vLLM stopped with the task
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
