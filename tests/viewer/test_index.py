"""The run index: key order over shuffled shards, failures merged in, columns, reuse, rebuild, bad input."""

import math
import os
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.viewer.errors import NotFound, ViewerError
from nemo_gym.viewer.index import open_run
from nemo_gym.run_files.metrics_file import metrics_heads
from tests.viewer.synthetic import expected_reward, rollout_row, write_run


def _column(index, name: str) -> list:
    return index.rows.read(name, 0, index.rows.rows).tolist()


def test_rows_come_in_key_order_with_failures_merged_in(tmp_path: Path) -> None:
    failed = {(2, 1): "timeout", (5, 0): "http_5xx"}
    files = write_run(tmp_path / "run.jsonl", tasks=6, repeats=3, shards=3, failed=failed)
    # A failure whose key succeeded later is no failure: it must not show up.
    with open(files[0].with_name("run_shard0_failures.jsonl"), "ab") as out:
        out.write(orjson.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "agent_a"},
                                "failure_class": "connect"}) + b"\n")
    index = open_run(str(tmp_path / "run_shard*.jsonl"), "a", tmp_path / "cache")
    keys = list(zip(_column(index, "task"), _column(index, "rollout")))
    assert keys == [(t, r) for t in range(6) for r in range(3)]
    assert index.meta["failures"] == 2 and index.failure_classes == ["", "timeout", "http_5xx"]
    for position, (task, rollout) in enumerate(keys):
        if (task, rollout) in failed:
            assert index.failure_classes[index.rows.value("failure", position)] == failed[(task, rollout)]
            assert math.isnan(index.rows.value("reward", position))
            assert index.row(position)["last_error"] == f"boom {failed[(task, rollout)]}"
        else:
            assert index.rows.value("reward", position) == expected_reward(task, rollout)
            assert index.rows.value("output_tokens", position) == 100 + 7 * rollout + task
            assert index.rows.value("tool_calls", position) == 1
            assert index.row(position) == rollout_row(task, rollout)
    assert index.find(2, 2) == 8 and index.task_span(5) == (15, 3)
    means = index.tasks.read("mean_reward", 0, 6).tolist()
    assert means[0] == pytest.approx((1 + 0 + 0) / 3)
    assert means[2] == pytest.approx((expected_reward(2, 0) + expected_reward(2, 2)) / 2)  # failed rollout left out
    with pytest.raises(NotFound, match="no rollout 7 of task 2"):
        index.find(2, 7)
    with pytest.raises(NotFound, match="no task 99"):
        index.task_span(99)


def test_the_index_is_reused_until_a_file_changes(tmp_path: Path) -> None:
    (path,) = write_run(tmp_path / "run.jsonl", tasks=4, repeats=2)
    first = open_run(str(path), "a", tmp_path / "cache")
    again = open_run(str(path), "a", tmp_path / "cache")
    assert first.built and not again.built and again.directory == first.directory
    with open(path, "ab") as out:
        out.write(orjson.dumps(rollout_row(4, 0)) + b"\n")
    os.utime(path, ns=(1, 1))  # a different mtime even within the same clock tick
    changed = open_run(str(path), "a", tmp_path / "cache")
    assert changed.built and changed.directory != first.directory and changed.meta["rows"] == 9


def test_overview_metrics_come_from_the_metrics_library(tmp_path: Path) -> None:
    (path,) = write_run(tmp_path / "run.jsonl", tasks=10, repeats=4, failed={(3, 3): "timeout"},
                        agents=("agent_a", "agent_b"))
    index = open_run(str(path), "a", tmp_path / "cache")
    overview = {entry["agent"]: entry for entry in index.overview()["agents"]}
    assert sorted(overview) == ["agent_a", "agent_b"]
    rewards = [expected_reward(t, r) for t in range(0, 10, 2) for r in range(4)]
    a = overview["agent_a"]
    assert a["agent_metrics"]["mean/reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert a["agent_metrics"]["ci95_low/reward"] <= a["agent_metrics"]["mean/reward"]
    assert a["failures_by_class"] == {"timeout": 1} and set(a["pass_at_k"]) == {"1", "2", "4"}
    assert sum(a["histogram"][1]) == len(rewards)
    assert not a["environment_metrics"] and overview["agent_b"]["failures_by_class"] == {}


def test_bad_rows_are_errors_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(orjson.dumps(rollout_row(0, 0)) + b"\n" + b'{"_ng_task_index":1,"_ng_rollout_index":0,broken\n')
    with pytest.raises(InputDataError, match=rf"{path}:2: not valid JSON"):
        open_run(str(path), "a", tmp_path / "cache")
    row = rollout_row(1, 0)
    del row["agent_ref"]
    path.write_bytes(orjson.dumps(rollout_row(0, 0)) + b"\n" + orjson.dumps(row) + b"\n")
    with pytest.raises(InputDataError, match=rf"{path}:2: rollout row has no agent_ref.name"):
        open_run(str(path), "a", tmp_path / "cache")
    path.write_bytes(b'{"no": "keys"}\n')
    with pytest.raises(InputDataError, match=rf"{path}:1: not a rollout row"):
        open_run(str(path), "a", tmp_path / "cache")
    with pytest.raises(ViewerError, match="no rollout files match"):
        open_run(str(tmp_path / "nothing*.jsonl"), "a", tmp_path / "cache")


def test_sidecar_files_matched_by_the_glob_are_not_rollouts(tmp_path: Path) -> None:
    write_run(tmp_path / "run.jsonl", tasks=3, repeats=1, failed={(0, 0): "timeout"})
    (tmp_path / "run_materialized_inputs.jsonl").write_bytes(b'{"x": 1}\n')
    index = open_run(str(tmp_path / "run*.jsonl"), "a", tmp_path / "cache")
    assert [p.name for p in index.rollout_files] == ["run.jsonl"] and index.meta["rows"] == 3


def test_metrics_heads_read_each_agent_without_its_task_list(tmp_path: Path) -> None:
    groups = b",".join(orjson.dumps({"_ng_task_index": i, "mean/reward": 0.5, "note": "]}\\n,"}) for i in range(5000))
    entries = [b'{"agent_ref":{"name":"%s"},"agent_metrics":{"mean/reward":%d},"key_metrics":{"pass@1":%d},'
               b'"group_level_metrics":[' % (name, n, n) + groups + b"]}" for n, name in enumerate((b"x", b"y"))]
    metrics = tmp_path / "run_aggregate_metrics.json"
    metrics.write_bytes(b"[\n" + b",\n".join(entries) + b"\n]\n")
    assert metrics_heads(metrics) == {"x": {"agent_metrics": {"mean/reward": 0}, "key_metrics": {"pass@1": 0}},
                                       "y": {"agent_metrics": {"mean/reward": 1}, "key_metrics": {"pass@1": 1}}}
