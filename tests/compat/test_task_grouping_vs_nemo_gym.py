"""Side by side with NeMo Gym 0.4.0 itself: the same dataset (repeated lines, caller task indices on some rows,
one repeated and one equal to an automatic index) through its `ng_run` + `ng_collect_rollouts` and through ours,
both against one instant stub model, with the example_single_tool_call environment and NeMo Gym's data format.
The rollout keys and every per-task and agent metric NeMo Gym writes must come out the same here; then our run is
cut short and resumed, and still gives every key exactly once."""

import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest
import yaml

from tests.collection.util import keys, read_rows, run_cli
from tests.helpers.nemo_gym_reference import AGENT, ReferenceStack, example_rows, reference_collect, reference_stack
from tests.helpers.stack import Stack, free_port, running_stack
from tests.reliability.conftest import INSTANT_CHAT, WEATHER_ENV

REPEATS = 2
# Per-task fields that are NeMo Gym's bookkeeping rather than metrics: its sample row and rollout list.
NOT_COMPARED = {"sample", "rollout_infos"}


def _row(city: str, **extra: Any) -> bytes:
    """A row in NeMo Gym's example format (developer + user message, its weather tool) asking about `city`."""
    example = orjson.loads(example_rows().read_bytes().splitlines()[0])
    params = example["responses_create_params"]
    params["input"][1]["content"] = f"what's the weather in {city}?"
    return orjson.dumps({"responses_create_params": params, "expected_city": city, **extra}) + b"\n"


def _dataset(path: Path) -> Path:
    paris, tokyo, lima = _row("Paris"), _row("Tokyo"), _row("Lima", _ng_task_index=7)
    path.write_bytes(paris + tokyo + paris + _row("Cairo", _ng_task_index=0) + tokyo + lima + lima + _row("Sydney")
                     + paris)
    return path


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, ReferenceStack, Path]]:
    work = tmp_path_factory.mktemp("grouping_vs_nemo_gym")
    chat_port = free_port()
    model = {"chat_stub": {"responses_api_models": {"instant_chat": {"entrypoint": str(INSTANT_CHAT),
                                                                     "port": chat_port}}},
             "policy_model": {"responses_api_models": {"vllm_model": {
                 "base_url": f"http://127.0.0.1:{chat_port}/v1", "api_key": "stub-key", "model": "instant"}}}}
    (work / "model.yaml").write_text(yaml.safe_dump(model))
    (work / "ours").mkdir()
    # Generous start-up limits: both stacks start while the shared 2-core machine may be far overloaded.
    with running_stack([f"+config_paths=[{WEATHER_ENV},{work / 'model.yaml'}]", f"+log_dir={work / 'ours' / 'logs'}"],
                       cwd=work / "ours", timeout_s=300) as ours:
        with reference_stack(work / "reference", f"http://127.0.0.1:{chat_port}/v1") as reference:
            yield ours, reference, work


def _collect_ours(ours: Stack, source: Path, out: Path, *extra: str) -> None:
    args = [f"+head_server.port={ours.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
            f"+input_jsonl_fpath={source}", f"+output_jsonl_fpath={out}", f"+num_repeats={REPEATS}", *extra]
    result = run_cli("collect", args, out.parent, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def _metrics(out: Path) -> dict[str, Any]:
    entries = orjson.loads(out.with_name(out.stem + "_aggregate_metrics.json").read_bytes())
    assert [entry["agent_ref"]["name"] for entry in entries] == [AGENT]
    return entries[0]


def _cities(out: Path) -> dict[tuple[int, int], str]:
    materialized = out.with_name(out.stem + "_materialized_inputs.jsonl")
    return {(r["_ng_task_index"], r["_ng_rollout_index"]): r["expected_city"] for r in read_rows(materialized)}


def _same(theirs: float, ours: float) -> bool:
    return math.isclose(theirs, ours, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.timeout(900)
def test_keys_and_metrics_equal_nemo_gym_and_resume_gives_every_key_once(stacks) -> None:
    ours, reference, work = stacks
    source = _dataset(work / "tasks.jsonl")
    their_out = work / "reference" / "rollouts.jsonl"
    result = reference_collect(work / "reference", reference.head_port, source, their_out, f"+num_repeats={REPEATS}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    our_out = work / "ours" / "rollouts.jsonl"
    _collect_ours(ours, source, our_out)

    # NeMo Gym's rule: lines 1, 3 and 9 are one task (0), and line 4's own index 0 joins it; 7 is given twice.
    expected = Counter({0: 4 * REPEATS, 1: 2 * REPEATS, 7: 2 * REPEATS, 2: REPEATS})
    assert Counter(task for task, _ in keys(their_out)) == expected
    assert sorted(keys(our_out)) == sorted(keys(their_out))
    # Which line each key samples: from the materialized inputs (NeMo Gym's outputs drop the row's own fields).
    assert _cities(our_out) == _cities(their_out)

    theirs, mine = _metrics(their_out), _metrics(our_out)
    their_groups = {g["_ng_task_index"]: g for g in theirs["group_level_metrics"]}
    my_groups = {g["_ng_task_index"]: g for g in mine["group_level_metrics"]}
    assert sorted(my_groups) == sorted(their_groups) == sorted(expected)
    for task, their_group in their_groups.items():
        for name, value in their_group.items():
            if name in NOT_COMPARED:
                continue
            assert name in my_groups[task], f"task {task}: NeMo Gym's {name} is missing from ours"
            assert _same(value, my_groups[task][name]), (task, name, value, my_groups[task][name])
    assert their_groups[0]["num_rollouts"] == their_groups[0]["expected_num_rollouts"] == 4 * REPEATS
    for section in ("agent_metrics", "key_metrics"):
        for name, value in theirs[section].items():
            assert name in mine["agent_metrics"], f"NeMo Gym's {section} {name} is missing from ours"
            assert _same(value, mine["agent_metrics"][name]), (name, value, mine["agent_metrics"][name])
    assert "mean/input_tokens" in theirs["agent_metrics"]  # token usage is compared, not absent on both sides

    # Resume with the grouped tasks: cut our output short (a torn last line included), continue, every key once.
    lines = our_out.read_bytes().splitlines(keepends=True)
    our_out.write_bytes(b"".join(lines[:7]) + lines[7][:20])
    _collect_ours(ours, source, our_out, "+resume_from_cache=true")
    assert Counter(keys(our_out)) == Counter(keys(their_out))
    assert orjson.loads(our_out.with_name("rollouts_manifest.json").read_bytes())["tasks"] == len(expected)
