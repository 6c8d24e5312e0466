"""Sharded collection (explicit and from a SLURM array environment) and ng_aggregate_rollouts over the shards."""

from pathlib import Path

import orjson

from tests.collection.conftest import CollectionStack
from tests.collection.util import keys, read_rows, run_cli, sidecar, write_rows

ROWS, REPEATS, SHARDS = 37, 2, 4


def _collect_shard(stack: CollectionStack, tmp_path: Path, index: int, env: dict | None = None) -> Path:
    out = tmp_path / f"rollouts_shard{index}.jsonl"
    shard_args = [] if env else [f"+num_shards={SHARDS}", f"+shard_index={index}"]
    result = run_cli("collect", stack.args(
        "+agent_name=agent_a", f"+input_jsonl_fpath={tmp_path}/in.jsonl", f"+output_jsonl_fpath={out}",
        f"+num_repeats={REPEATS}", "+disable_aggregation=true", *shard_args), tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not sidecar(out, "_aggregate_metrics.json").exists()
    return out


def test_four_shards_are_disjoint_and_cover_every_key(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    shard_keys = [set(keys(_collect_shard(collection_stack, tmp_path, i))) for i in range(SHARDS)]
    for i in range(SHARDS):
        for j in range(i + 1, SHARDS):
            assert not shard_keys[i] & shard_keys[j]
    assert set().union(*shard_keys) == {(t, r) for t in range(ROWS) for r in range(REPEATS)}
    assert all(len(k) >= 18 for k in shard_keys)  # balanced: 37 tasks over 4 shards


def test_slurm_array_environment_picks_the_shard(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    env = {"SLURM_ARRAY_TASK_COUNT": str(SHARDS), "SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10"}
    out = _collect_shard(collection_stack, tmp_path, 2, env=env)
    assert {t for t, _ in keys(out)} == {t for t in range(ROWS) if t % SHARDS == 2}
    manifest = orjson.loads(sidecar(out, "_manifest.json").read_bytes())
    assert (manifest["fingerprint"]["num_shards"], manifest["fingerprint"]["shard_index"]) == (SHARDS, 2)


def test_aggregate_merges_shards_in_key_order_with_metrics(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    for i in range(SHARDS):
        _collect_shard(collection_stack, tmp_path, i)
    merged = tmp_path / "all" / "rollouts.jsonl"
    result = run_cli("aggregate", collection_stack.args(
        f"+input_glob={tmp_path}/rollouts_shard*.jsonl", f"+output_jsonl_fpath={merged}"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "aggregating 4 file(s)" in result.stdout  # the shards' _materialized_inputs files are not rollouts
    assert keys(merged) == [(t, r) for t in range(ROWS) for r in range(REPEATS)]
    metrics = orjson.loads(sidecar(merged, "_aggregate_metrics.json").read_bytes())
    assert len(metrics) == 1 and metrics[0]["agent_ref"] == {"name": "agent_a"}
    assert metrics[0]["agent_metrics"]["num_rollouts"] == ROWS * REPEATS
    assert len(metrics[0]["group_level_metrics"]) == ROWS
    assert metrics[0]["key_metrics"]["mean/reward"] == sum(r["reward"] for r in read_rows(merged)) / (ROWS * REPEATS)

    # Metrics alone, over the shards as they are, land next to output_jsonl_fpath; nothing is merged.
    only_metrics = tmp_path / "m" / "rollouts.jsonl"
    result = run_cli("aggregate", collection_stack.args(
        f"+input_glob='{tmp_path}/rollouts_shard0.jsonl,{tmp_path}/rollouts_shard1.jsonl'",  # quoted: a,b is a sweep
        f"+output_jsonl_fpath={only_metrics}", "+merge_shards=false"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not only_metrics.exists() and sidecar(only_metrics, "_aggregate_metrics.json").exists()


def test_aggregate_with_no_matching_files_is_an_error(tmp_path: Path) -> None:
    result = run_cli("aggregate", [f"+input_glob={tmp_path}/nothing*.jsonl", f"+output_jsonl_fpath={tmp_path}/o.jsonl"],
                     tmp_path)
    assert result.returncode == 2 and "matches no rollout files" in result.stderr
