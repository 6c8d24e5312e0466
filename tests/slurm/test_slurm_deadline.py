"""Real Slurm, a three-minute time limit: the collector reads the task's end time from squeue, starts no rollout that
cannot finish before it, lets those in flight finish, and exits 79; the job script requeues the task, which goes on
where it stopped. No rollout is cut by the time limit, none is lost or duplicated, and the aggregate job runs once."""

import re
from pathlib import Path

from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows
from tests.slurm.util import (
    assert_merged_metrics,
    instant_model,
    job_ids,
    keys_of,
    make_workdir,
    stub_args,
    stub_reward,
    submit,
    wait_for_jobs,
)

# Every rollout is one model call of DELAY_S. A try has 180 s less its start-up and the 80 s lead (the 5 s SIGTERM
# lead, the 60 s Slurm may send it early, the job script's 15 s to stop and requeue), so at most 100 s: 200 rollouts
# at 4 in flight, fewer than ROWS.
ROWS, PARALLEL, DELAY_S, SIGNAL_LEAD_S = 220, 4, 2.0, 5


def test_a_task_drains_before_its_time_limit_and_requeues_itself(tmp_path: Path, slurm_jobs: set[str]) -> None:
    with instant_model(DELAY_S) as base_url:
        work = make_workdir(tmp_path, base_url, "instant-stub", ROWS)
        run = work / "run"
        record = submit(slurm_jobs, work, *stub_args("run", 1, 1, PARALLEL), "+slurm.time=00:03:00",
                        f"+slurm.signal_lead_s={SIGNAL_LEAD_S}")
        wait_for_jobs(job_ids(record), run / "logs", timeout_s=600)

    log = (run / "logs" / "shard0.log").read_text()
    tries = re.findall(r"try (\d+), on ", log)
    assert len(tries) >= 2, log  # the time limit came before the last rollout, by construction
    drains = re.findall(r"stopped starting rollouts: [^\n]*", log)
    assert len(drains) == len(tries) - 1 == log.count("drained before the time limit; requeueing"), log
    # Each drain came from Slurm's end time, and every rollout it had started finished before it.
    assert all("Slurm job " in line and "every rollout started finished" in line for line in drains), drains
    assert "received: stopping the worker" not in log, log  # the time limit's SIGTERM never had to stop a collector
    keys = keys_of(run / "rollouts.jsonl")
    assert len(keys) == len(set(keys)) == ROWS
    assert_merged_metrics(run, ROWS, 1, {t: stub_reward(row) for t, row in enumerate(generate_rows(ROWS, 0))})
