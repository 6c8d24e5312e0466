"""ng_collect_rollouts against real subprocess agent servers: results, files, input errors and exit codes."""

import subprocess
import time
from pathlib import Path

import orjson
import pytest

from nemo_gym.cli.collect import main_args
from nemo_gym.errors import NemoGymError
from nemo_gym.server.supervisor import free_port
from tests.collection.conftest import CollectionStack
from tests.collection.util import cli, keys, read_rows, run_cli, sidecar, write_rows


def test_collects_every_rollout_with_keys_files_and_metrics(collection_stack: CollectionStack, tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 30)
    rows = read_rows(inputs)
    rows[1]["agent_ref"] = {"name": "agent_b"}
    inputs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "deep" / "dir" / "r.jsonl"
    result = run_cli("collect", collection_stack.args(
        "+agent_name=agent_a", f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={out}",
        "+num_repeats={_default: 2, agent_b: 3}", "+num_samples_in_parallel=8", "+num_repeats_add_seed=true",
        "+responses_create_params={temperature: 0.25}"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(keys(out)) == sorted([(t, r) for t in range(30) for r in range(3 if t == 1 else 2)])
    output = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(out)}
    row = output[(1, 2)]
    assert row["agent_ref"] == {"name": "agent_b"} and row["reward"] == 1.0 and row["q"] == 1
    assert row["responses_create_params"]["temperature"] == 0.25 and row["responses_create_params"]["seed"] == 2
    assert row["response"]["output"][0]["type"] == "message"
    assert len(read_rows(sidecar(out, "_materialized_inputs.jsonl"))) == 61
    assert not sidecar(out, "_failures.jsonl").exists()
    manifest = orjson.loads(sidecar(out, "_manifest.json").read_bytes())
    assert manifest["fingerprint"]["num_repeats"] == {"_default": 2, "agent_b": 3}
    metrics = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert [m["agent_ref"]["name"] for m in metrics] == ["agent_a", "agent_b"]
    assert metrics[0]["agent_metrics"]["num_rollouts"] == 58 and metrics[1]["agent_metrics"]["num_rollouts"] == 3
    assert len(metrics[0]["group_level_metrics"]) == 29 and "key_metrics" in metrics[1]
    assert "61 rollouts collected" in result.stdout and "agent_b: mean/reward=" in result.stdout


def test_existing_output_is_never_overwritten_or_appended(collection_stack: CollectionStack, tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 3)
    out = tmp_path / "r.jsonl"
    out.write_text('{"_ng_task_index":0,"_ng_rollout_index":0,"reward":1}\n')
    result = run_cli("collect", collection_stack.args(
        "+agent_name=agent_a", f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={out}"), tmp_path)
    assert result.returncode == 2
    assert "already holds results of an earlier run; pass +resume_from_cache=true" in result.stderr
    assert len(read_rows(out)) == 1 and not sidecar(out, "_materialized_inputs.jsonl").exists()


def test_unreachable_head_server_fails_fast(tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 3)
    result = run_cli("collect", [f"+head_server.port={free_port()}", "+agent_name=agent_a",
                                 f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={tmp_path}/o/r.jsonl"],
                     tmp_path, timeout=30)
    assert result.returncode == 1 and "cannot reach the head server" in result.stderr  # downstream, not input
    assert not (tmp_path / "o").exists()


def _bad_input_cases(tmp_path: Path) -> list[tuple[bytes, list[str], str]]:
    good = orjson.dumps({"responses_create_params": {"input": "x"}})
    (tmp_path / "prompt.yaml").write_text("user: 'Q: {q}'\n")
    return [
        (good + b"\n{oops\n", [], "in.jsonl:2: malformed JSON"),
        (good + b'\n{"x": 1}\n', [], "in.jsonl:2: missing responses_create_params"),
        (good + b'\n{"responses_create_params": {"input": 5}}\n', [], "in.jsonl:2: responses_create_params.input"),
        (good + b'\n' + orjson.dumps({"responses_create_params": {"input": "x"}, "agent_ref": {"name": "ghost"}}),
         [], "in.jsonl:2: unknown agent 'ghost' (running agents: agent_a, agent_b, always_500,"),
        (b"\n\n", [], "no rows (the file is empty)"),
        # Rows may share an _ng_task_index (NeMo Gym's grouping); a negative one is still refused.
        (good + b"\n" + orjson.dumps({"responses_create_params": {"input": "y"}, "_ng_task_index": -1}), [],
         "in.jsonl:2: _ng_task_index must be a non-negative integer below 2**63, got -1"),
        (good, ["+num_repeats=-2"], "+num_repeats must be a positive integer, got -2"),
        (good, ["+num_repeats={_default: 1.5}"], "+num_repeats._default must be a positive integer"),
        (good, [f"+prompt_config={tmp_path}/prompt.yaml"], "in.jsonl:1: row already has responses_create_params.input"),
        (good, ["+agent_name=null"], "in.jsonl:1: row has no agent_ref and no +agent_name was given"),
    ]


def test_input_errors_name_the_problem_and_write_nothing(collection_stack: CollectionStack, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    for content, extra, message in _bad_input_cases(tmp_path):
        (tmp_path / "in.jsonl").write_bytes(content)
        args = collection_stack.args("+agent_name=agent_a", f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                                     f"+output_jsonl_fpath={out_dir}/r.jsonl", *extra)
        with pytest.raises(NemoGymError) as info:
            main_args(args)
        assert message in str(info.value), (message, str(info.value))
        assert not out_dir.exists(), f"{message}: wrote {list(out_dir.rglob('*'))}"


def test_input_error_exit_code_is_2(collection_stack: CollectionStack, tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(b'{"responses_create_params": {"input": "x"}}\n{bad\n')
    result = run_cli("collect", collection_stack.args(
        "+agent_name=agent_a", f"+input_jsonl_fpath={tmp_path}/in.jsonl", f"+output_jsonl_fpath={tmp_path}/r.jsonl"),
        tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "in.jsonl:2: malformed JSON" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_second_collector_on_the_same_output_is_refused(collection_stack: CollectionStack, tmp_path: Path) -> None:
    # Enough rows (150 s of work) that the first collector is still writing when the second one has started, however
    # slowly a loaded machine starts it; the first is killed as soon as the second has answered.
    inputs = write_rows(tmp_path / "in.jsonl", 20_000)
    args = collection_stack.args("+agent_name=slow_agent", f"+input_jsonl_fpath={inputs}",
                                 f"+output_jsonl_fpath={tmp_path}/r.jsonl", "+num_samples_in_parallel=4")
    first = subprocess.Popen(cli("collect", args), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        while not (tmp_path / "r.jsonl").exists() or not (tmp_path / "r.jsonl").stat().st_size:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        second = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path)
        assert second.returncode == 2 and "another ng_collect_rollouts is writing" in second.stderr
    finally:
        first.kill()
        first.wait()
