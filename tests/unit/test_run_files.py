"""nemo_gym.run_files, the one owner of a run's files: the latest-failure-per-key rule every reader shares, the
failures rewrite, the manifest, sidecar paths and globs, and the metrics file read back as it was written."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.rollout_collection import merge_shards
from nemo_gym.run_files.failures import latest_failures, write_failures
from nemo_gym.run_files.manifest import ManifestError, read_manifest, write_manifest
from nemo_gym.run_files.metrics_file import metrics_heads, read_metrics, writing_metrics
from nemo_gym.run_files.paths import RunPaths, report_path, rollout_files
from nemo_gym.run_files.rows import iter_lines, line_number_at


def _failure(task: int, rollout: int, failure_class: str, attempts: object = 1, agent: str = "a") -> bytes:
    return orjson.dumps({"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent},
                         "failure_class": failure_class, "attempts": attempts}) + b"\n"


def test_the_latest_record_of_a_key_wins_across_files_and_done_keys_have_none(tmp_path: Path) -> None:
    first, second = tmp_path / "a_failures.jsonl", tmp_path / "b_failures.jsonl"
    first.write_bytes(_failure(3, 0, "timeout") + b"\n" + _failure(1, 0, "connect") + _failure(3, 0, "http_5xx", 2)
                      + _failure(2, 0, "timeout", agent="b"))
    # The torn last record of a killed run: its key prefix is readable, its JSON is not. It loses only itself.
    second.write_bytes(_failure(1, 0, "invalid_response", "many") + _failure(3, 0, "timeout", 3)[:60])
    latest = latest_failures([first, second, tmp_path / "missing_failures.jsonl"], done={(2, 0)})
    assert list(latest) == [(3, 0), (1, 0)]  # the order of each key's first record
    assert [(r.failure_class, r.attempts, r.agent, r.file.name) for r in latest.values()] == [
        ("http_5xx", 2, "a", "a_failures.jsonl"), ("invalid_response", None, "a", "b_failures.jsonl")]
    record = latest[(3, 0)]
    assert first.read_bytes()[record.offset:record.offset + record.length] == _failure(3, 0, "http_5xx", 2)


def test_rewriting_failures_keeps_each_record_as_written_in_key_order(tmp_path: Path) -> None:
    path = tmp_path / "run_failures.jsonl"
    path.write_bytes(_failure(5, 1, "timeout") + _failure(0, 2, "connect") + _failure(5, 1, "http_5xx", 2)
                     + _failure(0, 2, "connect", 2).rstrip(b"\n"))  # a complete last record without its newline
    write_failures(path, latest_failures([path]))
    assert path.read_bytes() == _failure(0, 2, "connect", 2) + _failure(5, 1, "http_5xx", 2)
    write_failures(path, latest_failures([path], done={(0, 2), (5, 1)}))
    assert not path.exists() and not path.with_name(path.name + ".tmp").exists()


def test_merging_shards_survives_a_torn_failure_record(tmp_path: Path) -> None:
    shard = tmp_path / "shard.jsonl"
    shard.write_bytes(b'{"_ng_task_index":0,"_ng_rollout_index":0,"agent_ref":{"name":"a"},"reward":1.0}\n')
    RunPaths(shard).failures.write_bytes(_failure(1, 0, "timeout") + _failure(2, 0, "connect")[:50])
    stats = merge_shards([shard], tmp_path / "merged.jsonl")
    assert stats.failures == 1 and (tmp_path / "merged_failures.jsonl").read_bytes() == _failure(1, 0, "timeout")


def test_manifest_is_read_back_whole_and_a_broken_one_is_a_named_error(tmp_path: Path) -> None:
    path = RunPaths(tmp_path / "run.jsonl").manifest
    assert read_manifest(path) is None
    write_manifest(path, {"fingerprint": {"limit": None}, "shard_rollouts": 4})
    assert read_manifest(path) == {"fingerprint": {"limit": None}, "shard_rollouts": 4}
    path.write_bytes(b'{"fingerprint": ')
    with pytest.raises(ManifestError, match=r"run_manifest\.json is not valid JSON"):
        read_manifest(path)
    path.write_bytes(b"[1]")
    with pytest.raises(ManifestError, match=r"run_manifest\.json is not a JSON object"):
        read_manifest(path)


def test_sidecars_come_from_the_stem_and_globs_skip_them(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "out" / "r.v1.jsonl")
    assert [p.name for p in (paths.failures, paths.materialized_inputs, paths.manifest, paths.aggregate_metrics,
                             paths.collect_log, paths.prepared_inputs("benchmark"))] == [
        "r.v1_failures.jsonl", "r.v1_materialized_inputs.jsonl", "r.v1_manifest.json",
        "r.v1_aggregate_metrics.json", "r.v1_collect.log", "r.v1_benchmark_inputs.jsonl"]
    assert report_path(paths.aggregate_metrics).name == "r.v1_report.html"
    for name in ("b.jsonl", "a.jsonl", "a_failures.jsonl", "a_materialized_inputs.jsonl", "a_train_inputs.jsonl"):
        (tmp_path / name).write_bytes(b"{}\n")
    assert [p.name for p in rollout_files(f"{tmp_path}/*.jsonl, {tmp_path}/a.jsonl")] == ["a.jsonl", "b.jsonl"]


def test_the_metrics_file_reads_back_whole_and_by_its_heads(tmp_path: Path) -> None:
    path = tmp_path / "run_aggregate_metrics.json"
    with writing_metrics(path) as metrics:
        metrics.add("x", {"mean/reward": 0.5}, {"pass@1": 0.5}, iter([{"_ng_task_index": 0, "note": "]},\n"}]))
        metrics.add("y", {"mean/reward": 1.0}, {"pass@1": 1.0}, iter([]))
    assert read_metrics(path) == [
        {"agent_ref": {"name": "x"}, "agent_metrics": {"mean/reward": 0.5}, "key_metrics": {"pass@1": 0.5},
         "group_level_metrics": [{"_ng_task_index": 0, "note": "]},\n"}]},
        {"agent_ref": {"name": "y"}, "agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"pass@1": 1.0},
         "group_level_metrics": []}]
    assert metrics_heads(path) == {"x": {"agent_metrics": {"mean/reward": 0.5}, "key_metrics": {"pass@1": 0.5}},
                                   "y": {"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"pass@1": 1.0}}}
    with pytest.raises(RuntimeError), writing_metrics(path) as metrics:
        metrics.add("z", {}, {}, iter([]))
        raise RuntimeError("aggregation failed halfway")
    assert list(metrics_heads(path)) == ["x", "y"] and not path.with_name(path.name + ".tmp").exists()


def test_lines_carry_their_number_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a":1}\n\n  \n{"b":2}')
    assert list(iter_lines(path)) == [(1, 0, b'{"a":1}\n'), (4, 12, b'{"b":2}')]
    assert line_number_at(path, 12) == 4
    assert list(iter_lines(tmp_path / "none.jsonl", missing_ok=True)) == []
    with pytest.raises(FileNotFoundError):
        list(iter_lines(tmp_path / "none.jsonl"))
