"""What re-verification does with each rollout of a finished run, read from its files: verify, copy, carry or
missing, for our failure records and for NeMo Gym's failures sidecar."""

from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.reverify_plan import plan_steps, survey

RESPONSE = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}]}
CALLS = [{"endpoint": "http://127.0.0.1:8000/v1", "latency_s": 0.5}]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def _key(task: int, rollout: int = 0) -> dict:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout}


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """Task 0 verified, 1 a failed verification (ours), 2 a failure before verification, 3 a failed verification in
    NeMo Gym's sidecar form, 4 never run; the output is in completion order, not key order."""
    inputs = _write(tmp_path / "r_materialized_inputs.jsonl", [
        {**_key(task), "agent_ref": {"name": "judge_agent"}, "question": f"q{task}"} for task in (4, 2, 0, 1, 3)])
    rollouts = _write(tmp_path / "r.jsonl", [{**_key(0), "question": "q0", "response": RESPONSE, "reward": 1.0}])
    _write(tmp_path / "r_failures.jsonl", [
        {**_key(1), "failure_class": "connect", "attempts": 1},  # an earlier attempt; the latest record counts
        {**_key(1), "failure_class": "judge_error", "attempts": 2,
         "rollout": {"question": "q1", "response": RESPONSE, "_ng_model_calls": CALLS}},
        {**_key(2), "failure_class": "timeout", "attempts": 3},
        {**_key(3), "_ng_failure_class": "judge_failed", "question": "q3", "response": RESPONSE},
    ])
    return rollouts, inputs


@pytest.mark.parametrize("failed_only, first", [(False, "verify"), (True, "copy")])
def test_each_key_of_the_inputs_gets_its_step_in_key_order(tmp_path: Path, failed_only: bool, first: str) -> None:
    rollouts, inputs = _run(tmp_path)
    steps = list(plan_steps(rollouts, inputs, failed_only))
    assert [(step.key, step.action) for step in steps] == [
        ((0, 0), first), ((1, 0), "verify"), ((2, 0), "carry"), ((3, 0), "verify"), ((4, 0), "missing")]
    found = survey(iter(steps))
    assert found.agents == {"judge_agent"} and found.actions["verify"] == 2 + (not failed_only)
    for step in steps:
        if step.action == "verify":  # what the agent sent: the materialized row and the rollout's response
            body = orjson.loads(step.verify_body())
            kept = {"_ng_model_calls": CALLS} if step.key == (1, 0) else {}  # the rollout's calls go along
            assert body == {**_key(step.key[0]), "agent_ref": {"name": "judge_agent"},
                            "question": f"q{step.key[0]}", "response": RESPONSE, **kept}
    assert orjson.loads(steps[2].source_line)["failure_class"] == "timeout"  # carried as the run recorded it


def test_a_rollout_without_a_response_is_an_error_naming_its_line(tmp_path: Path) -> None:
    rollouts, inputs = _run(tmp_path)
    _write(rollouts, [{**_key(9), "reward": 0.0}, {**_key(0), "reward": 1.0}])
    [step] = [step for step in plan_steps(rollouts, inputs, False) if step.key == (0, 0)]
    with pytest.raises(InputDataError, match=rf"{rollouts}:2: the rollout has no 'response'"):
        step.verify_body()
