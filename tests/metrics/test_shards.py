"""Glob expansion and merging of shard files: key order, identical duplicates, conflicting duplicates, failures."""

import random
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection import _expand_input_glob, merge_shards


def _row(task: int, rollout: int, **extra: object) -> dict:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": float((task + rollout) % 2),
            "agent_ref": {"name": "a"}, **extra}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_glob_expansion(tmp_path: Path) -> None:
    for name in ("b2.jsonl", "b1.jsonl", "a1.jsonl", "c.txt"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "dir.jsonl").mkdir()
    d = str(tmp_path)
    assert _expand_input_glob(f"{d}/b*.jsonl") == [f"{d}/b1.jsonl", f"{d}/b2.jsonl"]
    # Each pattern's matches sorted, patterns in the order given, repeats keep their first place, blanks dropped.
    assert _expand_input_glob(f" {d}/b*.jsonl , ,{d}/a1.jsonl,{d}/b1.jsonl,") == [
        f"{d}/b1.jsonl", f"{d}/b2.jsonl", f"{d}/a1.jsonl"]
    assert _expand_input_glob(f"{d}/*.jsonl") == [f"{d}/a1.jsonl", f"{d}/b1.jsonl", f"{d}/b2.jsonl"]  # no dirs
    assert _expand_input_glob(f"{d}/nothing*") == [] and _expand_input_glob(" , ") == []


def test_four_shards_merge_to_the_single_run_file(tmp_path: Path) -> None:
    rows = [_row(t, r, response={"text": f"t{t}r{r}"}) for t in range(25) for r in range(3)]
    single = _write(tmp_path / "single.jsonl", rows)
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)  # shards hold keys in completion order
    shards = [_write(tmp_path / f"shard{i}.jsonl", [r for r in shuffled if r["_ng_task_index"] % 4 == i])
              for i in range(4)]
    stats = merge_shards(shards, tmp_path / "merged.jsonl")
    assert (stats.rows, stats.duplicates) == (75, 0)
    assert (tmp_path / "merged.jsonl").read_bytes() == single.read_bytes()


def test_identical_duplicates_are_dropped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _write(tmp_path / "a.jsonl", [_row(0, 0), _row(1, 0)])
    # Same content, different key order and spacing: still the same rollout.
    b = tmp_path / "b.jsonl"
    b.write_bytes(b'{"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}, "reward": 1.0}\n'
                  + orjson.dumps(_row(2, 0)) + b"\n")
    stats = merge_shards([a, b], tmp_path / "m.jsonl")
    assert (stats.rows, stats.duplicates) == (3, 1)
    assert [orjson.loads(x)["_ng_task_index"] for x in (tmp_path / "m.jsonl").read_bytes().splitlines()] == [0, 1, 2]
    err = capsys.readouterr().err
    assert "dropped 1 duplicate" in err and str(a) in err and str(b) in err


def test_conflicting_duplicates_name_both_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", [_row(0, 0)])
    b = _write(tmp_path / "b.jsonl", [_row(0, 0, reward=0.5)])
    with pytest.raises(InputDataError, match=r"\(_ng_task_index=0, _ng_rollout_index=0\) differs between .*a\.jsonl "
                                             r"and .*b\.jsonl"):
        merge_shards([a, b], tmp_path / "m.jsonl")
    assert not (tmp_path / "m.jsonl").exists()


def test_failures_sidecars_are_merged_without_keys_that_succeeded_elsewhere(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", [_row(0, 0)])
    b = _write(tmp_path / "b.jsonl", [_row(1, 0)])
    failure = {"agent_ref": {"name": "a"}, "failure_class": "timeout", "attempts": 3}
    _write(tmp_path / "a_failures.jsonl", [{"_ng_task_index": 1, "_ng_rollout_index": 0, **failure},
                                           {"_ng_task_index": 2, "_ng_rollout_index": 0, **failure}])
    stats = merge_shards([a, b], tmp_path / "m.jsonl")
    assert stats.failures == 1
    merged = [orjson.loads(x) for x in (tmp_path / "m_failures.jsonl").read_bytes().splitlines()]
    assert [(f["_ng_task_index"], f["failure_class"]) for f in merged] == [(2, "timeout")]


def test_an_index_larger_than_memory_merges_sorted_runs_from_disk(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Beyond _RUN_ROWS index entries the key index is sorted in runs on disk and merged; tiny runs and merge blocks
    # make this small input take that path, duplicates and conflicts across runs included.
    rows = [_row(t, r, response={"text": f"t{t}r{r}"}) for t in range(300) for r in range(4)]
    single = _write(tmp_path / "single.jsonl", rows)
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    shards = [_write(tmp_path / f"shard{i}.jsonl", shuffled[i::3]) for i in range(3)]
    again = _write(tmp_path / "again.jsonl", shuffled[:150])  # a re-run shard: identical copies
    monkeypatch.setattr("nemo_gym.run_files.key_order._RUN_ROWS", 100)
    monkeypatch.setattr("nemo_gym.run_files.key_order._MERGE_BLOCK", 7)
    stats = merge_shards([*shards, again], tmp_path / "merged.jsonl")
    assert (stats.rows, stats.duplicates) == (1200, 150)
    assert (tmp_path / "merged.jsonl").read_bytes() == single.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == []  # sorted runs removed
    conflict = _write(tmp_path / "conflict.jsonl", [_row(299, 3, response={"text": "another run"})])
    with pytest.raises(InputDataError, match=r"\(_ng_task_index=299, _ng_rollout_index=3\) differs"):
        merge_shards([*shards, conflict], tmp_path / "m2.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == []
