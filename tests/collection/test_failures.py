"""Infrastructure failures: classified, bounded, kept out of the output, retried on resume."""

from pathlib import Path

import orjson

from tests.collection.conftest import CollectionStack
from tests.collection.util import keys, read_rows, run_cli, sidecar

# agent -> (failure class it causes, attempts in one run with +max_attempts=2)
FLAKY = {
    "flaky_500": ("http_5xx", 2),
    "flaky_reset": ("connect", 2),
    "flaky_hang": ("timeout", 2),
    "flaky_downstream": ("timeout", 2),  # the agent's 502 carries the model server's class
    "bad_request": ("http_4xx", 1),  # a downstream 4xx is not retried
    "invalid_reply": ("invalid_response", 1),
}
FRACTION = {"flaky_hang": 0.2}
TASKS_PER_AGENT = 10


def _faulty(task: int, rollout: int, agent: str) -> bool:
    return (task * 7 + rollout * 3) % 100 < FRACTION.get(agent, 0.3) * 100


def _inputs(path: Path) -> dict[int, str]:
    agent_of = {}
    with open(path, "wb") as out:
        for task in range(TASKS_PER_AGENT * len(FLAKY)):
            agent = list(FLAKY)[task % len(FLAKY)]
            agent_of[task] = agent
            row = {"responses_create_params": {"input": f"q{task}"}, "agent_ref": {"name": agent}}
            out.write(orjson.dumps(row) + b"\n")
    return agent_of


def _args(stack: CollectionStack, tmp_path: Path, *extra: str) -> list[str]:
    return stack.args(f"+input_jsonl_fpath={tmp_path}/in.jsonl", f"+output_jsonl_fpath={tmp_path}/r.jsonl",
                      "+max_attempts=2", "+retry_backoff_s=0.05", "+rollout_timeout_s=0.5",
                      "+num_samples_in_parallel=32", *extra)


def test_failures_are_classified_kept_out_of_output_and_retried_on_resume(
        collection_stack: CollectionStack, tmp_path: Path) -> None:
    for agent in FLAKY:
        collection_stack.marker(agent).touch()
    agent_of = _inputs(tmp_path / "in.jsonl")
    expected_failed = {(t, 0) for t, agent in agent_of.items() if _faulty(t, 0, agent)}
    assert {agent_of[t] for t, _ in expected_failed} == set(FLAKY)

    first = run_cli("collect", _args(collection_stack, tmp_path), tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    out, failures_path = tmp_path / "r.jsonl", sidecar(tmp_path / "r.jsonl", "_failures.jsonl")
    assert set(keys(out)) == set((t, 0) for t in agent_of) - expected_failed
    assert all(isinstance(r["reward"], float) for r in read_rows(out))
    failures = {(f["_ng_task_index"], f["_ng_rollout_index"]): f for f in read_rows(failures_path)}
    assert set(failures) == expected_failed
    for key, failure in failures.items():
        agent = agent_of[key[0]]
        assert (failure["failure_class"], failure["attempts"]) == FLAKY[agent], (agent, failure)
        assert failure["agent_ref"] == {"name": agent} and failure["last_error"] and "reward" not in failure
    assert f"FAILED: {len(expected_failed)} rollouts (" in first.stdout and "http_4xx: " in first.stdout

    for agent in FLAKY:
        collection_stack.marker(agent).unlink()
    resumed = run_cli("collect", _args(collection_stack, tmp_path, "+resume_from_cache=true"), tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(expected_failed)} failed ones will be retried" in resumed.stdout
    assert sorted(keys(out)) == sorted((t, 0) for t in agent_of)
    assert not failures_path.exists()


def test_attempts_are_bounded_across_runs(collection_stack: CollectionStack, tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(b'{"responses_create_params": {"input": "x"}}\n' * 3)
    args = collection_stack.args("+agent_name=always_500", f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                                 f"+output_jsonl_fpath={tmp_path}/r.jsonl", "+max_attempts=2",
                                 "+max_total_attempts=3", "+retry_backoff_s=0.01")
    failures_path = sidecar(tmp_path / "r.jsonl", "_failures.jsonl")
    attempts = []
    for run in range(3):
        result = run_cli("collect", args + (["+resume_from_cache=true"] if run else []), tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        rows = read_rows(failures_path)
        assert len(rows) == 3 and {r["failure_class"] for r in rows} == {"http_5xx"}
        attempts.append({r["attempts"] for r in rows})
    assert attempts == [{2}, {3}, {3}]
    assert "3 of them were not retried: they used up +max_total_attempts=3" in result.stdout
    assert not (tmp_path / "r.jsonl").stat().st_size  # nothing succeeded: no output rows and no metrics
    assert not sidecar(tmp_path / "r.jsonl", "_aggregate_metrics.json").exists()
