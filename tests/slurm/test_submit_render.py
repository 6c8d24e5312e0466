"""ng_slurm_submit's rendering and checks, and the aggregate job's shard gate: no Slurm needed."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import ConfigError
from nemo_gym.slurm import submit, summary
from nemo_gym.slurm.templates import DEFAULT_TEMPLATES_DIR, render
from tests.slurm.util import make_workdir, stub_args


def test_dry_run_renders_valid_requeue_safe_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = make_workdir(tmp_path, "http://127.0.0.1:9/v1", "m", rows=4)
    monkeypatch.chdir(work)
    submit.main_args([*stub_args("run", 3, 2, 4), "+slurm.max_parallel=2", "+slurm.time=10", "+slurm.dry_run=true"])
    collect = (work / "run/slurm/collect.sbatch").read_text()
    for expected in ("#SBATCH --array=0-2%2", "#SBATCH --requeue", "#SBATCH --signal=B:TERM@60", "#SBATCH --time=10",
                     "+resume_from_cache=true", f'OUTPUT="{work}/run/rollouts/rollouts-shard${{SHARD}}-of3.jsonl"',
                     f'>"{work}/run/slurm/shard${{SHARD}}.done"', f"--output={work}/run/logs/shard%a.log", "trap ",
                     # an attempt's folder is named as squeue names the task: <array job>_<task>
                     'ATTEMPT="${SLURM_ARRAY_JOB_ID}_${SHARD}-try${SLURM_RESTART_COUNT:-0}"'):
        assert expected in collect
    aggregate = (work / "run/slurm/aggregate.sbatch").read_text()
    assert f'"+input_glob={work}/run/rollouts/rollouts-shard*-of3.jsonl"' in aggregate
    assert f'"+output_jsonl_fpath={work}/run/rollouts.jsonl"' in aggregate
    for script in ("collect", "aggregate"):
        subprocess.run(["bash", "-n", str(work / f"run/slurm/{script}.sbatch")], check=True)
    assert not (work / "run/slurm/submission.json").exists()  # nothing was submitted


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("+output_jsonl_fpath=x.jsonl", "set by the job script"),
        ("+slurm.cpus_per_tsk=2", r"did you mean \+slurm.cpus_per_task"),
        ("+slurm.dependency=after", "'afterok' or 'afterany', got 'after'"),
        ("+slurm.cpus_per_task=many", r"\+slurm.cpus_per_task must be an integer, got 'many'"),
        ("+num_shards=0", r"\+num_shards must be at least 1, got 0"),
    ],
)
def test_refuses_bad_options(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        submit.parse_request([*stub_args("run", 2, 1, 1), extra])


def test_job_scripts_ship_inside_the_package() -> None:
    # An installed nemo_gym (no checkout) must still find its templates: they live in the package, not in scripts/.
    import nemo_gym

    package = Path(nemo_gym.__file__).resolve().parent
    assert DEFAULT_TEMPLATES_DIR.is_relative_to(package)
    assert {"collect.sbatch", "aggregate.sbatch", "common.sh"} <= {p.name for p in DEFAULT_TEMPLATES_DIR.iterdir()}


def test_render_needs_every_placeholder() -> None:
    assert render("a {{x}} ${HOME}", {"x": "1"}) == "a 1 ${HOME}"
    with pytest.raises(ConfigError, match="y"):
        render("{{x}} {{y}}", {"x": "1"})


def test_summary_gates_incomplete_shards_and_checks_the_merge(tmp_path: Path) -> None:
    for shard in range(2):
        rows = b"".join(orjson.dumps({"_ng_task_index": t, "_ng_rollout_index": 0}) + b"\n" for t in (shard, shard + 2))
        (tmp_path / "rollouts").mkdir(exist_ok=True)
        (tmp_path / f"rollouts/rollouts-shard{shard}-of2.jsonl").write_bytes(rows)
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm/shard0.done").write_text("job1-try0\n")
    args = [str(tmp_path), "--num-shards", "2"]
    assert summary.main([*args, "--require-complete-shards"]) == 1
    (tmp_path / "slurm/shard1.done").write_text("job2-try0\n")
    assert summary.main([*args, "--require-complete-shards"]) == 0

    merged = b"".join((tmp_path / f"rollouts/rollouts-shard{i}-of2.jsonl").read_bytes() for i in range(2))
    (tmp_path / "rollouts.jsonl").write_bytes(merged + merged.splitlines(keepends=True)[0])
    (tmp_path / "rollouts_aggregate_metrics.json").write_text("[]")
    assert summary.main([*args, "--write", str(tmp_path / "summary.json")]) == 1
    assert "1 duplicate keys" in orjson.loads((tmp_path / "summary.json").read_bytes())["problems"][0]
    (tmp_path / "rollouts.jsonl").write_bytes(merged)
    assert summary.main([*args, "--write", str(tmp_path / "summary.json")]) == 0


def test_server_start_retries_when_a_port_was_taken(tmp_path: Path) -> None:
    # A stand-in ng_run: the first start finds its port taken, the second comes up and stays until stopped; the
    # stand-in ng_status says healthy once it is up (the job script asks ng_status, it never reads ng_run's output).
    fake = tmp_path / "bin" / "ng_run"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f"if [[ ! -e {tmp_path}/tried ]]; then touch {tmp_path}/tried; echo 'port 1 is already in use'; exit 2; fi\n"
        f"touch {tmp_path}/up; exec sleep 30\n"
    )
    fake.chmod(0o755)
    status = tmp_path / "bin" / "ng_status"
    status.write_text(f"#!/usr/bin/env bash\n[[ -e {tmp_path}/up ]]\n")
    status.chmod(0o755)
    script = (
        f"NG_PYTHON={sys.executable}; NG_STARTUP_TIMEOUT_S=10; PATH={fake.parent}:$PATH\n"
        f"source {DEFAULT_TEMPLATES_DIR / 'common.sh'}\n"
        f"ng_start_servers {tmp_path / 'logs'} +x=1 && ng_stop_servers && echo started-and-stopped\n"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert "retrying on new ports" in done.stdout and "started-and-stopped" in done.stdout, done.stdout + done.stderr


def test_the_follow_hint_names_the_queue_the_logs_and_the_resume(tmp_path: Path) -> None:
    layout = submit.RunLayout(tmp_path / "run", 2)
    hint = submit.follow_hint(layout, {"collect_job_id": "72", "aggregate_job_id": "73"})
    assert hint.splitlines() == [
        "follow it:   squeue -j 72,73",
        f"             tail -f {tmp_path}/run/logs/shard*.log",
        f"a task's servers: {tmp_path}/run/logs/shard<i>/72_<i>-try<n>/ng_run.log and servers/",
        f"the merge:   {tmp_path}/run/logs/aggregate.log (then {tmp_path}/run/rollouts.jsonl, "
        f"{tmp_path}/run/rollouts_aggregate_metrics.json)",
        f"if a task fails or is cancelled: ng_slurm_submit +run_dir={tmp_path}/run +resume=true",
    ]
    assert submit.follow_hint(layout, {"aggregate_job_id": "80"}).splitlines()[0] == "follow it:   squeue -j 80"
