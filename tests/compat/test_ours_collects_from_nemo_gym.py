"""Direction (b): our `ng_collect_rollouts` against NeMo Gym 0.4.0's own `ng_run` stack, compared with NeMo Gym's
collector on the same stack (the native pairing), on NeMo Gym's example rows plus two of ours."""

from pathlib import Path

from tests.collection.util import read_rows, run_cli, sidecar
from tests.helpers.nemo_gym_reference import AGENT, reference_collect, reference_stack, tagged_pids
from tests.compat.support import (REPEATS, aggregate_entry, chat_stub_config, input_rows, our_collect, rewards,
                                  seen_seed)
from tests.helpers.stack import running_stack

SEEDED = (f"+num_repeats={REPEATS}", "+num_repeats_add_seed=true")


def test_our_collector_runs_every_row_once_on_nemo_gyms_stack_with_native_rewards(tmp_path: Path) -> None:
    rows = input_rows(tmp_path / "input.jsonl")
    n_tasks = len(rows.read_bytes().splitlines())
    ours, native = tmp_path / "ours" / "rollouts.jsonl", tmp_path / "native" / "rollouts.jsonl"
    chat_args = [f"+config_paths=[{chat_stub_config(tmp_path / 'chat.yaml')}]", f"+log_dir={tmp_path / 'chat_logs'}"]
    with running_stack(chat_args, cwd=tmp_path, timeout_s=300) as chat:
        with reference_stack(tmp_path / "reference", f"{chat.url('chat_stub')}/v1") as reference:
            # Its Ray, too, on loopback (left to itself, it takes the machine's outward address)
            assert "Started Ray cluster at 127.0.0.1:" in reference.log_path.read_text()
            result = our_collect(tmp_path, reference.head_url, rows, ours, *SEEDED)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            theirs = reference_collect(tmp_path, reference.head_port, rows, native, *SEEDED)
            assert theirs.returncode == 0, theirs.stdout[-3000:] + theirs.stderr[-3000:]
            # A probe timeout a loaded machine cannot miss: the exit is exact, every server healthy.
            status = run_cli("status", [f"+head_server.port={reference.head_port}", "+health_timeout_s=120"],
                             tmp_path, timeout=600)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {line.split()[0]: line.split()[-1] for line in status.stdout.splitlines()[1:] if line.strip()}
    assert {name: rows.get(name) for name in (AGENT, "example_single_tool_call", "policy_model")} == dict.fromkeys(
        (AGENT, "example_single_tool_call", "policy_model"), "ok"), status.stdout
    assert not tagged_pids(reference.tag)  # NeMo Gym's ng_run, its servers and its Ray cluster are all gone

    got = rewards(ours)
    assert set(got) == {(task, rollout) for task in range(n_tasks) for rollout in range(REPEATS)}
    assert got == rewards(native)
    assert not sidecar(ours, "_failures.jsonl").exists() or not sidecar(ours, "_failures.jsonl").read_bytes().strip()
    # Our seed went where NeMo Gym's vllm_model reads it (its params forbid a top-level seed) and reached the model.
    for row in read_rows(ours):
        assert "seed" not in row["responses_create_params"]
        assert seen_seed(row) == str(row["_ng_rollout_index"])

    # Aggregated through NeMo Gym's agent with its verify_responses body: its answer is what our file holds.
    mine, reference_entry = aggregate_entry(ours), aggregate_entry(native)
    assert mine["key_metrics"] == reference_entry["key_metrics"]
    assert mine["agent_metrics"]["mean/reward"] == reference_entry["agent_metrics"]["mean/reward"]
    groups = {g["_ng_task_index"]: g for g in mine["group_level_metrics"]}
    assert set(groups) == set(range(n_tasks))
    for task, group in groups.items():
        # Per-rollout details only NeMo Gym's reward profiler produces, for exactly the rollouts collected.
        assert sorted(info["_ng_rollout_index"] for info in group["rollout_infos"]) == list(range(REPEATS))
        assert all(info["reward"] == got[task, info["_ng_rollout_index"]] for info in group["rollout_infos"])
