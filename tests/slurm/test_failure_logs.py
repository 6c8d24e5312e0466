"""A failed Slurm test prints what explains it: each run's submission record, which shards finished, and the last
lines of every log (each task's job script, ng_run and its servers), then the controller's log."""

from pathlib import Path

from tests.slurm import conftest


def test_run_logs_hold_every_log_of_every_run(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "work" / "run"
    (run / "slurm").mkdir(parents=True)
    (run / "slurm" / "submission.json").write_text('{"submissions": [{"collect_job_id": "9"}]}')
    (run / "slurm" / "shard0.done").write_text("9_0-try0\n")
    (run / "logs" / "shard1" / "9_1-try0" / "servers").mkdir(parents=True)
    (run / "logs" / "shard1.log").write_text("".join(f"line {i}\n" for i in range(500)) + "collector exited with 1\n")
    (run / "logs" / "shard1" / "9_1-try0" / "servers" / "policy_model.log").write_text("server said why\n")
    controller = tmp_path / "slurmctld.log"
    controller.write_text("_job_complete: JobId=9_1(13) WEXITSTATUS 1\n")
    monkeypatch.setattr(conftest, "CONTROLLER_LOG", controller)

    text = conftest.run_logs(tmp_path)
    assert f"=== {run}: done markers ['shard0.done']" in text and '"collect_job_id": "9"' in text
    assert f"--- {run}/logs/shard1.log\n" in text and "collector exited with 1" in text
    assert "line 380\n" not in text and "line 381\n" in text  # the last LOG_TAIL_LINES (120) lines of each log
    assert "server said why" in text and "WEXITSTATUS 1" in text
