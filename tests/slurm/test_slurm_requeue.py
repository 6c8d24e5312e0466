"""Real Slurm: an array task stopped mid-run (scancel, or a requeue as preemption does) loses and duplicates nothing."""

import subprocess
from pathlib import Path

from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows
from tests.slurm.util import (
    assert_merged_metrics,
    count_lines,
    instant_model,
    job_ids,
    keys_of,
    make_workdir,
    ng_slurm_submit,
    queued,
    stub_args,
    stub_reward,
    submit,
    wait_for_jobs,
    wait_until,
)

ROWS, REPEATS, SHARDS = 40, 4, 4
# Slow answers and low concurrency keep each task busy for about 10 s, long enough to stop it mid-run.
DELAY_S, PARALLEL = 0.5, 2


def _stop_mid_run(run: Path, array_job: str, commands: dict[int, list[str]]) -> dict[int, int]:
    """Run each shard's command on its array task as soon as that shard holds a few rollouts, and wait until each job
    script's SIGTERM handler has stopped everything; return the rollouts each shard had when it was stopped. Shards
    run side by side, so each is stopped on its own progress: stopping one after the other let the second finish
    first on a loaded machine."""
    outputs = {shard: run / "rollouts" / f"rollouts-shard{shard}-of{SHARDS}.jsonl" for shard in commands}
    unsent = dict(commands)

    def sent_to_every_writing_shard() -> bool:
        for shard in [shard for shard in unsent if count_lines(outputs[shard]) >= 4]:
            # Not checked: `scancel --batch` reports a failure when the job exits at once on the signal (Slurm
            # 22.05); the job script's log line below is the proof that the signal arrived.
            subprocess.run([*unsent.pop(shard), f"{array_job}_{shard}"], check=False)
        return not unsent

    wait_until(sent_to_every_writing_shard, 120, f"shards {sorted(commands)} to start writing", run / "logs")
    stopped_at = {}
    for shard in commands:
        log = run / "logs" / f"shard{shard}.log"
        wait_until(lambda: "stopped cleanly" in log.read_text(), 60, f"shard {shard} to stop", run / "logs")
        stopped_at[shard] = count_lines(outputs[shard])
        assert stopped_at[shard] < ROWS * REPEATS // SHARDS, \
            "the task finished before it could be stopped: raise DELAY_S"
    return stopped_at


def _resumed_from(run: Path, shard: int) -> int:
    """How many rollouts the shard's latest collector found already done when it started."""
    log = (run / "logs" / f"shard{shard}.log").read_text()
    return int(log.split("resuming: ")[-1].split()[0])


def _assert_complete(run: Path) -> None:
    keys = keys_of(run / "rollouts.jsonl")
    assert len(keys) == len(set(keys)) == ROWS * REPEATS
    # The metrics merged after a stop and a resubmission count each rollout once, with the stub's known rewards.
    assert_merged_metrics(run, ROWS, REPEATS, {t: stub_reward(row) for t, row in enumerate(generate_rows(ROWS, 0))})


def test_stopped_tasks_are_resubmitted_and_merge_is_exact(tmp_path: Path, slurm_jobs: set[str]) -> None:
    with instant_model(DELAY_S) as base_url:
        work = make_workdir(tmp_path, base_url, "instant-stub", ROWS)
        run = work / "run"
        first = submit(slurm_jobs, work, *stub_args("run", SHARDS, REPEATS, PARALLEL))
        array = first["submissions"][0]["collect_job_id"]
        # Shard 0 as --signal=B:TERM@N does before the time limit: SIGTERM to the job script alone, which must stop
        # the collector and ng_run itself. Shard 1 by scancel.
        stopped_at = _stop_mid_run(run, array, {0: ["scancel", "--batch", "--signal=TERM"], 1: ["scancel"]})
        refused = ng_slurm_submit(work, "+run_dir=run", "+resume=true")  # shards 2 and 3 are still at work
        assert refused.returncode != 0 and "still queued or running" in refused.stderr
        wait_for_jobs(job_ids(first), run / "logs")
        # afterok can no longer be met: Slurm drops the aggregate job instead of leaving it pending forever.
        assert not (run / "rollouts.jsonl").exists()
        (ng_run_log,) = run.glob("logs/shard0/*/ng_run.log")
        assert "received SIGTERM" in ng_run_log.read_text() and "all servers stopped" in ng_run_log.read_text()

        second = submit(slurm_jobs, work, "+run_dir=run", "+resume=true")
        assert second["submissions"][-1]["shards"] == [0, 1]
        wait_for_jobs(job_ids(second), run / "logs")

    _assert_complete(run)
    for shard in (0, 1):
        assert _resumed_from(run, shard) >= stopped_at[shard] > 0


def test_requeued_task_resumes_and_original_aggregate_runs(tmp_path: Path, slurm_jobs: set[str]) -> None:
    with instant_model(DELAY_S) as base_url:
        work = make_workdir(tmp_path, base_url, "instant-stub", ROWS)
        run = work / "run"
        record = submit(slurm_jobs, work, *stub_args("run", SHARDS, REPEATS, PARALLEL))
        array = record["submissions"][0]["collect_job_id"]
        stopped_at = _stop_mid_run(run, array, {0: ["scontrol", "requeue"]})[0]
        assert f"{array}_0" in queued({array}), "the requeued task should be back in the queue"
        wait_for_jobs(job_ids(record), run / "logs", timeout_s=300)

    _assert_complete(run)
    assert "try1" in (run / "logs" / "shard0.log").read_text()  # the same array task ran again under --requeue
    assert _resumed_from(run, 0) >= stopped_at > 0  # and skipped every rollout its first attempt had written
    assert f"(job {record['submissions'][0]['aggregate_job_id']})" in (run / "logs" / "aggregate.log").read_text()
