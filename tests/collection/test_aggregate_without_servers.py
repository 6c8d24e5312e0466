"""ng_aggregate_rollouts prints each agent's headline metrics; without servers it still writes the merged file, the
library metrics and the report, says that the environments' own metrics were skipped because no server answered,
and exits 1. With the servers up, the environment's metrics are there and it exits 0."""

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import orjson
import uvicorn

from nemo_gym.server.head import HeadServer
from nemo_gym.server.supervisor import free_port
from tests.collection.conftest import CollectionStack
from tests.collection.util import keys, read_rows, run_cli, sidecar, write_rows

ROWS, REPEATS = 6, 2


@contextmanager
def head_server_listing(servers: list[dict]) -> Iterator[int]:
    """Our head server, in this process, listing `servers` (which need not run); yields its port."""
    port = free_port()
    head = HeadServer({}, servers, ("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(head.app(), host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the head server did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _shards(stack: CollectionStack, tmp_path: Path) -> str:
    write_rows(tmp_path / "in.jsonl", ROWS)
    for index in range(2):
        result = run_cli("collect", stack.args(
            "+agent_name=agent_a", f"+input_jsonl_fpath={tmp_path}/in.jsonl",
            f"+output_jsonl_fpath={tmp_path}/shard{index}.jsonl", f"+num_repeats={REPEATS}", "+num_shards=2",
            f"+shard_index={index}", "+disable_aggregation=true"), tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    return f"+input_glob={tmp_path}/shard*.jsonl"


def test_without_servers_the_library_metrics_are_written_and_the_skip_is_said(
        collection_stack: CollectionStack, tmp_path: Path) -> None:
    glob = _shards(collection_stack, tmp_path)
    merged = tmp_path / "merged.jsonl"
    result = run_cli("aggregate", [glob, f"+output_jsonl_fpath={merged}", f"+head_server.port={free_port()}"],
                     tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the environments' own metrics were skipped because no server answered (agent_a: "
                           "cannot reach the head server at http://127.0.0.1:"), last
    assert "the library metrics, the report and the merged rollouts were written without them" in last
    assert keys(merged) == [(t, r) for t in range(ROWS) for r in range(REPEATS)]
    (entry,) = orjson.loads(sidecar(merged, "_aggregate_metrics.json").read_bytes())
    rewards = [row["reward"] for row in read_rows(merged)]
    assert entry["agent_metrics"]["mean/reward"] == sum(rewards) / len(rewards)
    assert entry["agent_metrics"]["num_rollouts"] == ROWS * REPEATS
    assert "pass@1[avg-of-2]" in entry["agent_metrics"]
    assert "environment metrics of agent_a skipped: no server answered" in sidecar(merged, "_report.html").read_text()
    assert f"  agent_a: mean/reward={sum(rewards) / len(rewards):.4g}" in result.stdout


def test_with_servers_the_environment_metrics_are_merged_in_and_headlines_printed(
        collection_stack: CollectionStack, tmp_path: Path) -> None:
    glob = _shards(collection_stack, tmp_path)
    merged = tmp_path / "merged.jsonl"
    result = run_cli("aggregate", collection_stack.args(glob, f"+output_jsonl_fpath={merged}"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (entry,) = orjson.loads(sidecar(merged, "_aggregate_metrics.json").read_bytes())
    # The fault agent's own answer: its key metrics are only mean/reward, and it counts tasks itself.
    assert entry["key_metrics"] == {"mean/reward": entry["agent_metrics"]["mean/reward"]}
    assert f"  agent_a: mean/reward={entry['key_metrics']['mean/reward']:.4g}\n" in result.stdout
    assert "skipped" not in result.stdout + result.stderr


def test_an_agent_that_does_not_answer_is_skipped_by_name(collection_stack: CollectionStack, tmp_path: Path) -> None:
    glob = _shards(collection_stack, tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    listing = [{"name": "agent_a", "kind": "responses_api_agents", "implementation": "fault_agent", "url": dead}]
    with head_server_listing(listing) as head_port:
        result = run_cli("aggregate", [glob, f"+output_jsonl_fpath={tmp_path}/merged.jsonl",
                                       f"+head_server.port={head_port}"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"skipped because no server answered (agent_a: nothing answers at {dead}/aggregate_metrics)"
            in result.stderr)
    (entry,) = orjson.loads((tmp_path / "merged_aggregate_metrics.json").read_bytes())
    assert entry["agent_metrics"]["num_rollouts"] == ROWS * REPEATS
