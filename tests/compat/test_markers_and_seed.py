"""NeMo Gym agents' failure markers (`_ng_failure_class`, `_ng_no_persist`) and the `num_repeats_add_seed` seed in
`metadata.extra_body`, as our collector handles them."""

import json
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.compat.extra_body import ExtraBodyError, extra_body, with_seed
from nemo_gym.compat.markers import marked_failure
from nemo_gym.server.head import HeadServer
from tests.collection.util import read_rows, run_cli, sidecar, write_rows
from tests.compat.threaded import json_app, serving

AGENT = "marker_agent"


def _reply(row: dict[str, Any]) -> dict[str, Any]:
    """A NeMo Gym-style agent: task 1 fails `transient`, task 2 is killed (no-persist), the rest succeed."""
    result = {**row, "reward": 0.0, "response": {"output": []}}
    if row["_ng_task_index"] == 1:
        result.update(_ng_failure_class="transient", error_message="sandbox hiccup")
    elif row["_ng_task_index"] == 2:
        result.update(_ng_failure_class="kill_shaped", _ng_no_persist=True)
    else:
        result["reward"] = 1.0
    return result


def test_marked_replies_are_failures_of_their_class() -> None:
    assert marked_failure({"reward": 1.0}) is None
    assert marked_failure({"reward": 0.0, "_ng_failure_class": None}) is None
    transient = marked_failure({"reward": 0.0, "_ng_failure_class": "transient", "error_message": "boom"})
    assert transient.failure_class == "transient" and transient.message.endswith(": boom")
    assert marked_failure({"_ng_no_persist": True}).failure_class == "kill_shaped"


def test_collector_records_marked_rollouts_as_failures_never_as_rewards(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "in.jsonl", 4)
    out = tmp_path / "out" / "rollouts.jsonl"
    with serving(json_app({"/run": _reply, "/aggregate_metrics": {"agent_metrics": {}}})) as agent_url:
        listing = [{"name": AGENT, "kind": "responses_api_agents", "implementation": "x", "url": agent_url}]
        with serving(HeadServer({}, listing, ("127.0.0.1", 1)).app()) as head_url:
            args = [f"+head_server.port={head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
                    f"+input_jsonl_fpath={rows}", f"+output_jsonl_fpath={out}"]
            result = run_cli("collect", args, tmp_path)
    assert result.returncode != 0  # failures outstanding
    assert sorted(r["_ng_task_index"] for r in read_rows(out)) == [0, 3]
    failures = {f["_ng_task_index"]: f for f in read_rows(sidecar(out, "_failures.jsonl"))}
    assert {task: f["failure_class"] for task, f in failures.items()} == {1: "transient", 2: "kill_shaped"}
    assert "sandbox hiccup" in failures[1]["last_error"]
    assert "FAILED: 2 rollouts (kill_shaped: 1, transient: 1)" in result.stdout


def test_seed_goes_to_metadata_extra_body_and_top_level_only_for_our_stack() -> None:
    params = {"input": "q", "metadata": {"extra_body": json.dumps({"top_k": 5}), "tag": "t"}}
    ours = with_seed(params, 3, top_level=True)
    theirs = with_seed(params, 3, top_level=False)
    assert ours["seed"] == 3 and "seed" not in theirs
    assert extra_body(ours) == extra_body(theirs) == {"top_k": 5, "seed": 3}
    assert theirs["metadata"]["tag"] == "t" and isinstance(theirs["metadata"]["extra_body"], str)
    assert params["metadata"]["extra_body"] == '{"top_k": 5}'  # the caller's params are untouched
    assert extra_body({"input": "q"}) == {} and with_seed({"input": "q"}, 0, False)["metadata"] == {
        "extra_body": '{"seed": 0}'}
    with pytest.raises(ExtraBodyError, match="not valid JSON"):
        extra_body({"metadata": {"extra_body": "{seed"}})
    with pytest.raises(ExtraBodyError, match="must hold a JSON object"):
        extra_body({"metadata": {"extra_body": "[1]"}})


def test_a_bad_extra_body_in_an_input_row_names_the_file_and_line(tmp_path: Path) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"responses_create_params": {"input": "a"}}\n'
                    '{"responses_create_params": {"input": "b", "metadata": {"extra_body": "{oops"}}}\n')
    listing = [{"name": AGENT, "kind": "responses_api_agents", "implementation": "x", "url": "http://127.0.0.1:9"}]
    with serving(HeadServer({}, listing, ("127.0.0.1", 1)).app()) as head_url:
        result = run_cli("collect", [f"+head_server.port={head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
                                     f"+input_jsonl_fpath={rows}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
                                     "+num_repeats_add_seed=true"], tmp_path)
    assert result.returncode == 2
    assert f"{rows}:2" in result.stderr and "metadata.extra_body is not valid JSON" in result.stderr
