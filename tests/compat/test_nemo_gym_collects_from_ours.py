"""Direction (a): NeMo Gym 0.4.0's own `ng_collect_rollouts` against our `ng_run` stack, compared with our collector
on the same stack (the native pairing), on NeMo Gym's example rows plus two of ours, and on each of our
multiple_choice, instruction_following and judge environments."""

from pathlib import Path

import httpx
import orjson
import pytest

from nemo_gym.resources_servers.judge.tests.judge_stack import FAULTY
from tests.collection.util import head_args, read_rows, run_cli
from tests.compat.environment_rows import ENVIRONMENTS, agent_of, environment_stack, write_rows
from tests.helpers.nemo_gym_reference import reference_collect
from tests.compat.support import (REPEATS, SECRET, aggregate_entry, input_rows, our_collect, our_stack_config,
                                  rewards, seen_seed)
from tests.helpers.stack import free_port, running_stack

SEEDED = (f"+num_repeats={REPEATS}", "+num_repeats_add_seed=true")


def test_nemo_gym_collector_runs_every_row_once_on_our_stack_with_native_rewards(tmp_path: Path) -> None:
    rows = input_rows(tmp_path / "input.jsonl")
    n_tasks = len(rows.read_bytes().splitlines())
    theirs, native = tmp_path / "theirs" / "rollouts.jsonl", tmp_path / "native" / "rollouts.jsonl"
    with running_stack(our_stack_config(tmp_path / "stack.yaml", free_port()), cwd=tmp_path, timeout_s=300) as stack:
        served = httpx.get(f"{stack.head_url}/global_config_dict_yaml", trust_env=False).text
        result = reference_collect(tmp_path, int(stack.head_url.rsplit(":", 1)[1]), rows, theirs, *SEEDED)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        ours = our_collect(tmp_path, stack.head_url, rows, native, *SEEDED)
        assert ours.returncode == 0, ours.stdout[-3000:] + ours.stderr[-3000:]

    assert SECRET not in served and "api_key" in served  # the key is named, its value redacted
    got = rewards(theirs)
    assert set(got) == {(task, rollout) for task in range(n_tasks) for rollout in range(REPEATS)}
    assert got == rewards(native)
    assert sorted(set(got.values())) == [0.0, 1.0]  # NeMo Gym's rows have no expected city; ours score 1
    assert not theirs.with_name("rollouts_failures.jsonl").read_bytes().strip()
    # NeMo Gym's seed (metadata.extra_body) reached the Chat Completions request through our vllm_model.
    assert all(seen_seed(row) == str(row["_ng_rollout_index"]) for row in read_rows(theirs))

    # Our agent answered NeMo Gym's /aggregate_metrics body in its format: its collector validated and wrote it.
    entry = aggregate_entry(theirs)
    assert set(entry) == {"agent_ref", "agent_metrics", "key_metrics", "group_level_metrics"}
    assert entry["agent_metrics"]["mean/reward"] == sum(got.values()) / len(got)
    by_task = {g["_ng_task_index"]: g["mean/reward"] for g in entry["group_level_metrics"]}
    assert by_task == {task: sum(got[task, r] for r in range(REPEATS)) / REPEATS for task in range(n_tasks)}
    assert entry["key_metrics"]["mean/reward"] == aggregate_entry(native)["agent_metrics"]["mean/reward"]
    assert orjson.loads(theirs.read_bytes().splitlines()[0])["agent_ref"]["name"] == entry["agent_ref"]["name"]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_nemo_gym_collector_collects_from_each_new_environment_as_ours_does(tmp_path: Path, environment: str) -> None:
    """multiple_choice, instruction_following and judge: NeMo Gym's collector gets the rewards ours gets, and the
    judge's failed verifications land in its failures sidecar (its `_ng_failure_class`), not among its rewards."""
    rows = write_rows(environment, tmp_path / "input.jsonl")
    theirs, native = tmp_path / "theirs" / "rollouts.jsonl", tmp_path / "native" / "rollouts.jsonl"
    agent = agent_of(environment)
    with environment_stack(environment, tmp_path) as stack:
        result = reference_collect(tmp_path, int(stack.head_url.rsplit(":", 1)[1]), rows, theirs,
                                   f"+num_repeats={REPEATS}", agent=agent)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        ours = run_cli("collect", [*head_args(stack.head_url), f"+agent_name={agent}", f"+input_jsonl_fpath={rows}",
                                   f"+output_jsonl_fpath={native}", f"+num_repeats={REPEATS}"], tmp_path)
        assert ours.returncode in (0, 1), ours.stdout[-3000:] + ours.stderr[-3000:]

    got = rewards(theirs)
    assert got == rewards(native) and sorted(set(got.values())) == [0.0, 1.0]
    their_failures = read_rows(theirs.with_name("rollouts_failures.jsonl")) if environment == "judge" else []
    our_failures = read_rows(native.with_name("rollouts_failures.jsonl")) if environment == "judge" else []
    assert {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in their_failures} == {
        (r["_ng_task_index"], r["_ng_rollout_index"]) for r in our_failures}
    assert all(r["_ng_failure_class"] == "judge_error" and "reward" not in r for r in their_failures)
    assert len(their_failures) == (len(FAULTY) * REPEATS if environment == "judge" else 0)
    entry = orjson.loads(theirs.with_name("rollouts_aggregate_metrics.json").read_bytes())[0]
    assert entry["agent_ref"]["name"] == agent
    assert entry["agent_metrics"]["mean/reward"] == pytest.approx(sum(got.values()) / len(got))  # failures left out
