"""Real servers: live aggregation (end of ng_collect_rollouts) and ng_aggregate_rollouts give the same metrics;
4 shards merged equal the single run; the report renders; W&B offline holds the rollouts and the metrics."""

import shutil
import struct
import subprocess
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from tests.collection.util import keys, read_rows, run_cli, sidecar, stack_config, write_rows
from tests.helpers.requirements import require
from tests.helpers.stack import Stack, running_stack

ROWS, REPEATS = 21, 4


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("metrics_stack")
    config = stack_config(workdir / "agents.yaml", {"agent_a": {}})
    with running_stack([f"+config_paths=[{config}]"], cwd=workdir) as running:
        yield running


def _port(stack: Stack) -> str:
    return f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}"


def _collect(stack: Stack, cwd: Path, out: Path, *extra: str, env: dict | None = None
             ) -> subprocess.CompletedProcess:
    return run_cli("collect", [_port(stack), "+agent_name=agent_a", f"+input_jsonl_fpath={cwd}/in.jsonl",
                               f"+output_jsonl_fpath={out}", f"+num_repeats={REPEATS}", *extra], cwd, env=env)


def _metrics(out: Path) -> list[dict]:
    return orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())


def test_live_and_offline_metrics_agree_and_shards_merge_to_the_single_run(stack: Stack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    single = tmp_path / "single.jsonl"
    result = _collect(stack, tmp_path, single, "+num_samples_in_parallel=7")
    assert result.returncode == 0, result.stdout + result.stderr
    live = _metrics(single)
    m = live[0]["agent_metrics"]
    assert m["num_rollouts"] == ROWS * REPEATS and m["pass@4/num_tasks"] == ROWS and "median/reward" in m
    assert m["ci95_low/reward"] <= m["mean/reward"] <= m["ci95_high/reward"] and m["failure_rate"] == 0
    assert len(live[0]["group_level_metrics"]) == ROWS and "std/reward" in live[0]["group_level_metrics"][0]

    again = tmp_path / "again" / "rollouts.jsonl"
    result = run_cli("aggregate", [_port(stack), f"+input_glob={single}", f"+output_jsonl_fpath={again}",
                                   "+merge_shards=false"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _metrics(again) == live  # same rows, same code path: equal to the last bit, per-task lists included

    for i in range(4):
        shard = tmp_path / f"shard{i}.jsonl"
        result = _collect(stack, tmp_path, shard, "+num_shards=4", f"+shard_index={i}", "+disable_aggregation=true")
        assert result.returncode == 0, result.stdout + result.stderr
    merged = tmp_path / "merged" / "rollouts.jsonl"
    result = run_cli("aggregate", [_port(stack), f"+input_glob={tmp_path}/shard*.jsonl",
                                   f"+output_jsonl_fpath={merged}"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    by_key = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(single)}
    assert keys(merged) == sorted(by_key)
    assert all(row == by_key[(row["_ng_task_index"], row["_ng_rollout_index"])] for row in read_rows(merged))
    assert _metrics(merged) == live

    report = sidecar(merged, "_report.html")
    html = report.read_text()
    assert "agent_a" in html and 'class="pass-at-k"' in html and 'class="histogram"' in html
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(chromium is not None, "no chromium to render the report (apt-get install chromium)")
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    f"--screenshot={shot}", "--window-size=1000,900", f"file://{report}"],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000  # a rendered page with charts, not a blank one


def test_wandb_offline_run_holds_rollouts_and_metrics(stack: Stack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    result = _collect(stack, tmp_path, out, "+upload_rollouts_to_wandb=true", "+wandb_project=ng-test",
                      "+wandb_name=run1", "+wandb_chunk_rows=25",
                      "+responses_create_params={temperature:0.5,api_key:sk-secret-value}", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    tables = sorted((run_dir / "files" / "media" / "table").glob("rollouts_*.table.json"))
    logged = [row for t in tables for row in orjson.loads(t.read_bytes())["data"]]
    assert len(logged) == ROWS * REPEATS and len(tables) >= 1
    columns = orjson.loads(tables[0].read_bytes())["columns"]
    assert {"_ng_task_index", "reward", "response"} <= set(columns)
    assert len(tables) == -(-ROWS * REPEATS // 25)  # logged in chunks of +wandb_chunk_rows as rows arrived
    records = list(_wandb_records(next(run_dir.glob("run-*.wandb"))))
    summary = {i.key: orjson.loads(i.value_json) for r in records if r.HasField("summary") for i in r.summary.update}
    assert summary["agent_a/num_rollouts"] == ROWS * REPEATS
    assert summary["agent_a/mean/reward"] == _metrics(out)[0]["agent_metrics"]["mean/reward"]
    key_metrics = _metrics(out)[0]["key_metrics"]
    assert key_metrics and all(summary[f"key_metrics/agent_a/{k}"] == v for k, v in key_metrics.items())
    config = {i.key: i.value_json for r in records if r.HasField("run") for i in r.run.config.update}
    assert "sk-secret-value" not in str(config) and "REDACTED" in config["responses_create_params"]
    assert orjson.loads(config["wandb_project"]) == "ng-test"
    assert sum(r.HasField("artifact") for r in records) >= 1  # metrics file and report


def _wandb_records(path: Path) -> Iterator:
    """Records of an offline run file: W&B's LevelDB-style log (7-byte header, 32 KiB blocks) of protobufs."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, parts = path.read_bytes(), 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):
            pos += left
            continue
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record
            parts = b""


def test_missing_wandb_login_is_an_error_before_any_rollout(stack: Stack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 3)
    out = tmp_path / "r.jsonl"
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "HOME": str(tmp_path), "NETRC": str(tmp_path / "none")}
    result = _collect(stack, tmp_path, out, "+upload_rollouts_to_wandb=true", "+wandb_project=p", env=env)
    assert result.returncode == 2 and "wandb is not logged in" in result.stderr
    assert not out.exists()
