"""ng_e2e_collect_rollouts refuses a run before any server starts: every server appends its pid to a marker file when
it starts serving, and a refused run leaves no marker (and no server log folder)."""

from pathlib import Path

import orjson
import pytest
import yaml

from nemo_gym.server.supervisor import free_port
from tests.collection.util import FAULT_AGENT, run_cli, write_rows


def _config(tmp_path: Path, datasets: dict[str, str]) -> Path:
    """One fault agent with a `benchmark` dataset per entry {name: file}, marking its start in `started.txt`."""
    agent = {"responses_api_agents": {"fault_agent": {
        "entrypoint": str(FAULT_AGENT), "started_marker": str(tmp_path / "started.txt"),
        "datasets": [{"name": name, "type": "benchmark", "jsonl_fpath": path} for name, path in datasets.items()]}}}
    path = tmp_path / "e2e.yaml"
    path.write_text(yaml.safe_dump({"agent_a": agent}))
    return path


def _e2e(tmp_path: Path, config: Path, *extra: str):
    args = [f"+config_paths=[{config}]", f"+head_server.port={free_port()}", "+split=benchmark",
            "+output_jsonl_fpath=out/bench.jsonl", f"+log_dir={tmp_path}/logs", *extra]
    return run_cli("e2e", args, tmp_path)


def _assert_refused_before_start(tmp_path: Path, result, message: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "starting" not in result.stdout
    assert not (tmp_path / "started.txt").exists(), "a server started before the run was refused"
    assert not (tmp_path / "logs").exists()


def test_a_rerun_into_an_existing_output_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    write_rows(tmp_path / "bench.jsonl", 3)
    config = _config(tmp_path, {"bench": "bench.jsonl"})
    first = _e2e(tmp_path, config)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len((tmp_path / "started.txt").read_text().splitlines()) == 1  # the marker works: the first run started
    (tmp_path / "started.txt").unlink()
    prepared = (tmp_path / "out" / "bench_benchmark_inputs.jsonl").read_bytes()

    write_rows(tmp_path / "bench.jsonl", 4)  # the dataset changed meanwhile
    again = _e2e(tmp_path, config, f"+log_dir={tmp_path}/logs2")
    assert again.returncode == 2 and "already holds results of an earlier run" in again.stderr
    assert not (tmp_path / "started.txt").exists() and not (tmp_path / "logs2").exists()
    # The earlier run's prepared inputs are left as its resume needs them.
    assert (tmp_path / "out" / "bench_benchmark_inputs.jsonl").read_bytes() == prepared

    changed = _e2e(tmp_path, config, f"+log_dir={tmp_path}/logs3", "+resume_from_cache=true")
    assert changed.returncode == 2 and "refusing to resume" in changed.stderr and "this run differs" in changed.stderr
    assert not (tmp_path / "started.txt").exists() and not (tmp_path / "logs3").exists()


@pytest.mark.parametrize("rows, message", [
    ([b'{"responses_create_params": {"input": "q0"}}', b'{"q": 1}'],
     "missing responses_create_params (or pass +prompt_config"),
    ([b'{"responses_create_params": {"input": "q0"}}', b"{not json"], "malformed JSON"),
])
def test_a_bad_row_is_refused_before_any_server_starts(tmp_path: Path, rows: list[bytes], message: str) -> None:
    (tmp_path / "bench.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    result = _e2e(tmp_path, _config(tmp_path, {"bench": "bench.jsonl"}))
    _assert_refused_before_start(tmp_path, result, message)
    assert ":2: " in result.stderr


def test_differing_rows_sharing_an_index_across_datasets_name_both_files(tmp_path: Path) -> None:
    def row(text: str) -> bytes:
        return orjson.dumps({"responses_create_params": {"input": text}, "_ng_task_index": 3}) + b"\n"

    (tmp_path / "one.jsonl").write_bytes(row("a") + row("a"))  # identical rows may share it
    (tmp_path / "two.jsonl").write_bytes(row("b"))
    result = _e2e(tmp_path, _config(tmp_path, {"one": "one.jsonl", "two": "two.jsonl"}))
    _assert_refused_before_start(tmp_path, result,
                                 "two.jsonl:1: _ng_task_index 3 is also carried by one.jsonl:1, a different row")


def test_a_bad_setting_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    write_rows(tmp_path / "bench.jsonl", 2)
    result = _e2e(tmp_path, _config(tmp_path, {"bench": "bench.jsonl"}), "+num_samples_in_parallel=0")
    _assert_refused_before_start(tmp_path, result, "num_samples_in_parallel")
