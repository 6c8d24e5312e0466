"""Config checking, the key bitmap, and the crash-safety primitives of the store, without servers."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError, InputDataError, NemoGymError
from nemo_gym.rollout_collection import RolloutCollectionConfig, _expand_input_glob, merge_shards
from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.run_files.rows import keyed, row_key
from nemo_gym.rollout_collection.manifest import changed_fields
from nemo_gym.rollout_collection.store import compact_failures, repair_torn_tail, scan_done

BASE = ["+input_jsonl_fpath=in.jsonl", "+output_jsonl_fpath=out/r.jsonl"]


def _config(tmp_path: Path, *args: str) -> RolloutCollectionConfig:
    return RolloutCollectionConfig.from_global(load_global_config([*BASE, *args], cwd=tmp_path, require_complete=False))


def test_defaults_and_sidecar_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ARRAY_TASK_COUNT", raising=False)
    config = _config(tmp_path, "+head_server.port=12345")
    assert config.head_server_url == "http://127.0.0.1:12345"
    assert config.shard() == (1, 0) and config.repeats_for("x") == 1
    assert config.materialized_jsonl_fpath == Path("out/r_materialized_inputs.jsonl")
    assert config.failures_jsonl_fpath == Path("out/r_failures.jsonl")
    assert config.manifest_fpath == Path("out/r_manifest.json")
    assert config.aggregate_metrics_fpath == Path("out/r_aggregate_metrics.json")


@pytest.mark.parametrize("args, message", [
    (["+num_repeats=-1"], "+num_repeats must be a positive integer, got -1"),
    (["+num_repeats=0"], "+num_repeats must be a positive integer"),
    (["+num_repeats=two"], "+num_repeats must be an integer or a mapping or null, got 'two'"),
    (["+num_repeats={_default: 2, a: 0}"], "+num_repeats.a must be a positive integer, got 0"),
    (["+limit=-1"], "+limit must be at least 0"),
    (["+limit=ten"], "+limit must be an integer or null, got 'ten'"),
    (["+num_samples_in_parallel=0"], "+num_samples_in_parallel must be at least 1"),
    (["+resume_from_cache=yes"], "+resume_from_cache must be true or false, got 'yes'"),
    (["+responses_create_params=3"], "+responses_create_params must be a mapping"),
    (["+num_shards=4", "+shard_index=4"], "+shard_index must be in [0, 3] for 4 shards, got 4"),
    (["+num_repeat=4"], "unknown option +num_repeat; did you mean +num_repeats?"),
    (["+rollout_timeout_s=0"], "+rollout_timeout_s must be positive"),
])
def test_bad_options_are_named(tmp_path: Path, args: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, *args)
    assert message in str(info.value)


def test_missing_required_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing required option \+input_jsonl_fpath"):
        RolloutCollectionConfig.from_global(load_global_config(["+output_jsonl_fpath=o.jsonl"], cwd=tmp_path,
                                                               require_complete=False))


def test_slurm_array_defaults_subtract_min_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "5")
    assert _config(tmp_path).shard() == (4, 2)
    assert _config(tmp_path, "+num_shards=2", "+shard_index=1").shard() == (2, 1)


def test_keyset_is_compact_and_exact() -> None:
    keys = KeySet(rollouts_per_task=4)
    for task in range(250_000):
        keys.add(task, task % 4)
    assert len(keys) == 250_000 and (10, 2) in keys and (10, 3) not in keys and (10, 9) not in keys
    assert not keys.add(10, 2)
    assert sum(len(page) for page in keys._pages.values()) <= 128 * 1024  # 1M key slots in 128 KiB
    with pytest.raises(ValueError):
        keys.add(1, 4)


def test_row_key_fast_path_and_fallback() -> None:
    assert row_key(orjson.dumps(keyed(3, 1, {"a": 1, "_ng_task_index": 9}))) == (3, 1)
    assert row_key(b'{"a": 1, "_ng_rollout_index": 2, "_ng_task_index": 5}\n') == (5, 2)
    assert row_key(b'{"_ng_task_index": "5", "_ng_rollout_index": 2}') is None
    assert row_key(b"{torn") is None


def test_torn_tail_is_trimmed_to_the_last_full_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    full = orjson.dumps(keyed(0, 0, {"reward": 1})) + b"\n"
    path.write_bytes(full + b'{"_ng_task_index":1,"_ng_rollo')
    assert repair_torn_tail(path) == len(b'{"_ng_task_index":1,"_ng_rollo')
    assert path.read_bytes() == full
    assert repair_torn_tail(path) == 0
    path.write_bytes(b'{"_ng_task_index":1')
    assert repair_torn_tail(path) > 0 and path.read_bytes() == b""


def test_scan_refuses_corruption_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(keyed(0, 0, {})) + b"\nnot json\n" + orjson.dumps(keyed(1, 0, {})) + b"\n")
    with pytest.raises(NemoGymError, match=r"r.jsonl:2: not a rollout row"):
        scan_done(path, 1)


def test_compact_failures_keeps_latest_outstanding(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    records = [keyed(0, 0, {"failure_class": "timeout", "attempts": 1}),
               keyed(1, 0, {"failure_class": "connect", "attempts": 1}),
               keyed(0, 0, {"failure_class": "http_5xx", "attempts": 2})]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    done = KeySet(1)
    done.add(1, 0)
    outstanding = compact_failures(path, done)
    assert outstanding.count == 1 and outstanding.by_class == {"http_5xx": 1}
    assert [orjson.loads(line)["attempts"] for line in path.read_bytes().splitlines()] == [2]
    done.add(0, 0)
    assert compact_failures(path, done).count == 0 and not path.exists()


def test_changed_fields_name_old_and_new() -> None:
    assert changed_fields({"limit": 5, "num_repeats": 2}, {"limit": 5, "num_repeats": 4}) == ["num_repeats: 2 -> 4"]


def test_expand_input_glob(tmp_path: Path) -> None:
    for name in ("a/1.jsonl", "a/2.jsonl", "b/3.jsonl"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    found = _expand_input_glob(f"{tmp_path}/a/*.jsonl, {tmp_path}/*/*.jsonl,{tmp_path}/missing.jsonl")
    assert found == [str(tmp_path / n) for n in ("a/1.jsonl", "a/2.jsonl", "b/3.jsonl")]


def test_merge_shards_orders_by_key_and_drops_identical_duplicates(tmp_path: Path) -> None:
    one, two = tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"
    one.write_bytes(b"".join(orjson.dumps(keyed(t, 0, {"s": t})) + b"\n" for t in (4, 0, 2)))
    two.write_bytes(b"".join(orjson.dumps(keyed(t, 0, {"s": t})) + b"\n" for t in (3, 1, 2)))
    stats = merge_shards([one, two], tmp_path / "all.jsonl")
    rows = [orjson.loads(line) for line in (tmp_path / "all.jsonl").read_bytes().splitlines()]
    assert [r["_ng_task_index"] for r in rows] == [0, 1, 2, 3, 4]
    assert (stats.rows, stats.duplicates) == (5, 1)


def test_merge_shards_refuses_conflicting_duplicates_naming_both_files(tmp_path: Path) -> None:
    one, two = tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"
    one.write_bytes(orjson.dumps(keyed(2, 0, {"s": 0})) + b"\n")
    two.write_bytes(orjson.dumps(keyed(2, 0, {"s": 1})) + b"\n")
    with pytest.raises(InputDataError) as err:
        merge_shards([one, two], tmp_path / "all.jsonl")
    assert "s0.jsonl" in str(err.value) and "s1.jsonl" in str(err.value)
