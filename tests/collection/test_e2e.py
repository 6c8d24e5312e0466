"""ng_e2e_collect_rollouts: prepare a split from the agents' datasets, start the servers, collect, aggregate, stop."""

from pathlib import Path

import orjson
import yaml

from nemo_gym.server.supervisor import free_port, port_is_free
from tests.collection.util import FAULT_AGENT, keys, read_rows, run_cli, sidecar, write_rows


def _config(tmp_path: Path) -> Path:
    write_rows(tmp_path / "a_bench.jsonl", 3)
    write_rows(tmp_path / "b_bench.jsonl", 2, agent_ref={"name": "agent_b"})
    write_rows(tmp_path / "b_train.jsonl", 5)

    def agent(*datasets: tuple[str, str]) -> dict:
        return {"responses_api_agents": {"fault_agent": {"entrypoint": str(FAULT_AGENT), "datasets": [
            {"name": name, "type": kind, "jsonl_fpath": name + ".jsonl"} for name, kind in datasets]}}}

    tree = {"agent_a": agent(("a_bench", "benchmark")),
            "agent_b": agent(("b_bench", "benchmark"), ("b_train", "train"))}
    (tmp_path / "e2e.yaml").write_text(yaml.safe_dump(tree))
    return tmp_path / "e2e.yaml"


def test_e2e_collects_every_benchmark_dataset_and_stops_servers(tmp_path: Path) -> None:
    port = free_port()
    args = [f"+config_paths=[{_config(tmp_path)}]", f"+head_server.port={port}", "+split=benchmark",
            "+output_jsonl_fpath=out/bench.jsonl", "+num_repeats=2", f"+log_dir={tmp_path}/logs"]
    result = run_cli("e2e", args, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out" / "bench.jsonl"
    assert sorted(keys(out)) == [(t, r) for t in range(5) for r in range(2)]
    agents = {r["_ng_task_index"]: r["agent_ref"]["name"] for r in read_rows(out)}
    assert agents == {0: "agent_a", 1: "agent_a", 2: "agent_a", 3: "agent_b", 4: "agent_b"}
    assert len(read_rows(sidecar(out, "_benchmark_inputs.jsonl"))) == 5
    metrics = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert [(m["agent_ref"]["name"], m["agent_metrics"]["num_rollouts"]) for m in metrics] == [
        ("agent_a", 6), ("agent_b", 4)]
    assert "all servers stopped" in result.stdout and port_is_free("127.0.0.1", port)

    again = run_cli("e2e", [*args, "+resume_from_cache=true", "+reuse_existing_data_preparation=true"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reusing prepared benchmark inputs" in again.stdout and "collecting 0 of 10 rollouts" in again.stdout
    assert len(keys(out)) == 10


def test_e2e_with_no_dataset_for_the_split_starts_nothing(tmp_path: Path) -> None:
    args = [f"+config_paths=[{_config(tmp_path)}]", f"+head_server.port={free_port()}", "+split=validation",
            "+output_jsonl_fpath=out/v.jsonl", f"+log_dir={tmp_path}/logs"]
    result = run_cli("e2e", args, tmp_path)
    assert result.returncode == 2
    assert "no agent in the configs has a dataset of type 'validation' (dataset types: benchmark, train)" in (
        result.stderr)
    assert not (tmp_path / "logs").exists() and not (tmp_path / "out").exists()
