"""run_from_config of both helpers does what the CLIs do: the same files, byte for byte where the run is
deterministic (the CLIs are now thin callers of these helpers; this checks the subprocess path against the
in-process one)."""

from pathlib import Path

import orjson

from nemo_gym.rollout_collection import (
    RolloutAggregationConfig,
    RolloutAggregationHelper,
    RolloutCollectionConfig,
    RolloutCollectionHelper,
)
from nemo_gym.sync_bridge import run_sync
from tests.collection.conftest import CollectionStack
from tests.collection.util import read_rows, run_cli, sidecar, write_rows

SETTINGS = {"agent_name": "agent_a", "num_repeats": 2, "max_attempts": 2, "retry_backoff_s": 0.01}


def _inputs(path: Path) -> Path:
    write_rows(path, 12)
    rows = read_rows(path)
    for row in rows[::4]:
        row["agent_ref"] = {"name": "always_500"}  # tasks 0, 4, 8 fail: a failures file to compare too
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _sorted_lines(path: Path) -> list[bytes]:
    return sorted(path.read_bytes().splitlines())


def test_collection_helper_writes_what_the_cli_writes(collection_stack: CollectionStack, tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in.jsonl")
    by_cli, by_helper = tmp_path / "cli" / "r.jsonl", tmp_path / "helper" / "r.jsonl"
    cli = run_cli("collect", collection_stack.args(
        f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={by_cli}", *(f"+{k}={v}" for k, v in SETTINGS.items())),
        tmp_path)
    assert cli.returncode == 1, cli.stdout + cli.stderr  # failures remain
    config = RolloutCollectionConfig(input_jsonl_fpath=str(inputs), output_jsonl_fpath=str(by_helper),
                                     head_server_url=collection_stack.stack.head_url, **SETTINGS)
    summary = run_sync(RolloutCollectionHelper().run_from_config(config))

    assert (summary.total, summary.succeeded, summary.failed, summary.ok) == (24, 18, 6, False)
    assert summary.failures_by_class == {"http_5xx": 6}
    assert summary.aggregate_metrics_fpath == sidecar(by_helper, "_aggregate_metrics.json")
    assert _sorted_lines(by_helper) == _sorted_lines(by_cli) and len(_sorted_lines(by_cli)) == 18
    for suffix in ("_failures.jsonl", "_materialized_inputs.jsonl", "_aggregate_metrics.json"):
        assert sidecar(by_helper, suffix).read_bytes() == sidecar(by_cli, suffix).read_bytes(), suffix
    manifests = [orjson.loads(sidecar(p, "_manifest.json").read_bytes()) for p in (by_cli, by_helper)]
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]
    assert sidecar(by_helper, "_report.html").is_file()


def test_aggregation_helper_merges_and_aggregates_like_the_cli(collection_stack: CollectionStack,
                                                               tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 9)
    for shard in range(3):
        config = RolloutCollectionConfig(
            input_jsonl_fpath=str(inputs), output_jsonl_fpath=str(tmp_path / f"shard{shard}.jsonl"),
            head_server_url=collection_stack.stack.head_url, num_shards=3, shard_index=shard,
            disable_aggregation=True, **SETTINGS)
        assert run_sync(RolloutCollectionHelper().run_from_config(config)).ok
    by_cli, by_helper = tmp_path / "cli" / "all.jsonl", tmp_path / "helper" / "all.jsonl"
    cli = run_cli("aggregate", collection_stack.args(f"+input_glob={tmp_path}/shard*.jsonl",
                                                     f"+output_jsonl_fpath={by_cli}"), tmp_path)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    config = RolloutAggregationConfig(input_glob=f"{tmp_path}/shard*.jsonl", output_jsonl_fpath=str(by_helper),
                                      head_server_url=collection_stack.stack.head_url)
    metrics_path = run_sync(RolloutAggregationHelper().run_from_config(config))

    assert metrics_path == sidecar(by_helper, "_aggregate_metrics.json")
    assert by_helper.read_bytes() == by_cli.read_bytes() and len(read_rows(by_cli)) == 18
    assert metrics_path.read_bytes() == sidecar(by_cli, "_aggregate_metrics.json").read_bytes()
    assert orjson.loads(metrics_path.read_bytes())[0]["agent_metrics"]["num_rollouts"] == 18
