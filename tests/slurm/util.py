"""Helpers for the Slurm tests: an instant chat model, work directories, submitting runs and waiting for them."""

import fcntl
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import httpx
import orjson
import pytest

from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows
from nemo_gym.run_files.rows import row_key
from tests.helpers.stack import REPO_ROOT, environment_config, free_port
from tests.slurm.apps.instant_chat_model import answer

STUB_APP = Path(__file__).parent / "apps" / "instant_chat_model.py"
# One test session at a time uses the machine's one Slurm cluster (see conftest.slurm_cluster).
CLUSTER_LOCK = Path(os.environ.get("NG_SLURM_STATE_DIR", "/tmp/nemo_gym_slurm")).with_suffix(".lock")
CLUSTER_LOCK_WAIT_S = 800.0  # within pytest's 900 s per test, which the first Slurm test's set-up counts in
CONFIGS = REPO_ROOT / "configs"
MATH_CONFIG = environment_config("math")


@contextmanager
def cluster_lock(wait_s: float) -> Iterator[bool]:
    """Hold CLUSTER_LOCK (an exclusive flock, released when this process ends however it ends) while the block runs;
    yields False when another process held it for all of `wait_s`."""
    CLUSTER_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(CLUSTER_LOCK, "a") as lock:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(1)
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def instant_model(delay_s: float = 0.0) -> Iterator[str]:
    """The instant chat-completions stub on a free port; yields its base URL (ending in /v1)."""
    port = free_port()
    popen = subprocess.Popen(
        [sys.executable, str(STUB_APP), "--port", str(port), "--delay-s", str(delay_s)], start_new_session=True
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base_url}/models", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert popen.poll() is None and time.monotonic() < deadline, "instant model did not start"
            time.sleep(0.1)
        yield base_url
    finally:
        os.killpg(popen.pid, signal.SIGTERM)
        popen.wait(timeout=10)


def make_workdir(path: Path, base_url: str, model_name: str, rows: int, seed: int = 0) -> Path:
    """A working directory with env.yaml pointing at the model and `rows` arithmetic tasks in input.jsonl."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "env.yaml").write_text(
        f"policy_base_url: {base_url}\npolicy_api_key: dummy\npolicy_model_name: {model_name}\n"
    )
    (path / "input.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in generate_rows(rows, seed)))
    return path


def ng_slurm_submit(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nemo_gym.slurm.submit", *args], cwd=workdir, capture_output=True, text=True,
        timeout=60,
    )


def submit(jobs: set[str], workdir: Path, *args: str) -> dict:
    """Run ng_slurm_submit in `workdir`, add its job ids to `jobs`, and return the run's submission record."""
    done = ng_slurm_submit(workdir, *args)
    assert done.returncode == 0, f"ng_slurm_submit failed:\n{done.stdout}\n{done.stderr}"
    run_dir = next(a.split("=", 1)[1] for a in args if a.startswith("+run_dir="))
    record = orjson.loads((workdir / run_dir / "slurm" / "submission.json").read_bytes())
    jobs |= job_ids(record)
    return record


def queued(job_ids: set[str]) -> dict[str, str]:
    """squeue id -> state of the queued or running jobs (and array tasks) of `job_ids`."""
    # --array: one line per array task; pending tasks would otherwise be folded into one "ID_[0,2-3]" line.
    out = subprocess.run(["squeue", "-h", "--array", "-o", "%F %i %T"], capture_output=True, text=True,
                         check=True).stdout
    rows = (line.split() for line in out.splitlines())
    return {job: state for array, job, state in rows if array in job_ids}


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*.log")))
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; squeue: {queued_all()}\n{tails}")
        time.sleep(1)


def queued_all() -> str:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout


def wait_for_jobs(job_ids: set[str], logs: Path, timeout_s: float = 240) -> None:
    wait_until(lambda: not queued(job_ids), timeout_s, f"jobs {sorted(job_ids)} to leave the queue", logs)


def job_ids(record: dict) -> set[str]:
    return {entry[k] for entry in record["submissions"] for k in ("collect_job_id", "aggregate_job_id") if k in entry}


def keys_of(path: Path) -> list[tuple[int, int]]:
    with path.open("rb") as f:
        return [key for line in f if (key := row_key(line)) is not None]


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def stub_args(run_dir: str, shards: int, repeats: int, parallel: int) -> list[str]:
    return [
        f"+config_paths=[{MATH_CONFIG},{CONFIGS / 'vllm_model.yaml'}]",
        "+agent_name=math_simple_agent", "+input_jsonl_fpath=input.jsonl",
        f"+num_repeats={repeats}", f"+num_samples_in_parallel={parallel}",
        f"+run_dir={run_dir}", f"+num_shards={shards}",
    ]


def stub_reward(row: dict) -> float:
    """The reward the instant model earns on an input row (its `answer` is right when the first operand is even)."""
    question = row["responses_create_params"]["input"][0]["content"]
    return float(answer(question) == f"The answer is {row['expected_answer']}.")


def assert_merged_metrics(run: Path, tasks: int, repeats: int, expected_rewards: dict[int, float] | None = None
                          ) -> dict:
    """The merged metrics file agrees with the merged rollouts, counted and averaged here from the rows themselves
    (and with `expected_rewards`, task index -> reward, where the model's answers are known); returns the metrics."""
    rows = [orjson.loads(line) for line in (run / "rollouts.jsonl").read_bytes().splitlines()]
    by_task: dict[int, list[float]] = {}
    for row in rows:
        by_task.setdefault(row["_ng_task_index"], []).append(row["reward"])
    if expected_rewards is not None:
        assert {t: set(r) for t, r in by_task.items()} == {t: {r} for t, r in expected_rewards.items()}
    (entry,) = orjson.loads((run / "rollouts_aggregate_metrics.json").read_bytes())
    metrics = entry["agent_metrics"]
    mean = sum(r["reward"] for r in rows) / len(rows)
    assert metrics["num_rollouts"] == len(rows) == tasks * repeats and metrics["num_tasks"] == tasks
    assert metrics["mean/reward"] == pytest.approx(mean) and metrics["num_failed"] == 0
    groups = {g["_ng_task_index"]: g for g in entry["group_level_metrics"]}
    assert sorted(groups) == sorted(by_task) == list(range(tasks))
    for task, rewards in by_task.items():
        assert groups[task]["num_rollouts"] == repeats == len(rewards)
        assert groups[task]["mean/reward"] == pytest.approx(sum(rewards) / repeats)
    return metrics
