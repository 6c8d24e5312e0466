"""The grouping rule alone, without servers: our materialized keys equal those of NeMo Gym 0.4.0's own row
preprocessing (run in its venv) on tricky files; shards split tasks, not their rollouts; memory stays flat."""

import io
import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import InputPlan, materialize_inputs
from nemo_gym.rollout_collection.manifest import fingerprint
from nemo_gym.rollout_collection.task_groups import MEMORY_ENTRIES, TaskGrouper
from tests.helpers.nemo_gym_reference import run_reference_python
from tests.helpers.stack import REPO_ROOT

AGENTS = {"a", "b"}
# Its preprocessing step, as ng_collect_rollouts runs it, for each config given: every materialized row's key, agent
# and input text. One process for all cases (importing NeMo Gym takes seconds).
REFERENCE_KEYS = """
import json, sys
from nemo_gym.rollout_collection import RolloutCollectionConfig, RolloutCollectionHelper
answers = []
for values in json.loads(sys.argv[1]):
    rows = RolloutCollectionHelper()._preprocess_rows_from_config(RolloutCollectionConfig.model_validate(values))
    answers.append([[r["_ng_task_index"], r["_ng_rollout_index"], r["agent_ref"]["name"],
                     r["responses_create_params"]["input"]] for r in rows])
print(json.dumps(answers))
"""


def _line(text: str, **extra: object) -> bytes:
    return orjson.dumps({"responses_create_params": {"input": text}, **extra})


def _ours(tmp_path: Path, source: Path, **values: object) -> tuple[InputPlan, list[list]]:
    config = RolloutCollectionConfig.from_mapping({"input_jsonl_fpath": str(source),
                                                   "output_jsonl_fpath": str(tmp_path / "o.jsonl"), **values})
    out = io.BytesIO()
    plan = materialize_inputs(config, source, config.agent_name, AGENTS, None, out)
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    return plan, [[r["_ng_task_index"], r["_ng_rollout_index"], r["agent_ref"]["name"],
                   r["responses_create_params"]["input"]] for r in rows]


CASES = {
    # Repeats sample a task again; caller index 0 equals the first automatic index and joins that task.
    "repeats_and_colliding_caller_index": [
        _line("p"), _line("q"), _line("p"), _line("c", _ng_task_index=0), _line("q"), _line("r", _ng_task_index=5),
        _line("r", _ng_task_index=5), _line("s"), _line("p")],
    # CRLF reads as LF; a last line without a newline is not the same line as one with it (NeMo Gym reads text).
    "line_endings": [_line("p") + b"\r", _line("p"), _line("q"), _line("p") + b"\r", _line("p")],
    # Different agents per row with per-agent repeats; an index given on a later row only.
    "agents_and_late_index": [_line("p", agent_ref={"name": "b"}), _line("q"), _line("p", agent_ref={"name": "b"}),
                              _line("q", _ng_task_index=1), _line("z", _ng_task_index=3)],
}


VALUES = {"repeats_2": {"num_repeats": 2}, "per_agent_limit_4": {"num_repeats": {"_default": 1, "b": 3}, "limit": 4}}


def _write_case(folder: Path, name: str) -> Path:
    source = folder / f"{name}.jsonl"
    source.write_bytes(b"\n".join(CASES[name]) + (b"" if name == "line_endings" else b"\n"))
    return source


def _config(folder: Path, name: str, values: str) -> dict:
    return {"input_jsonl_fpath": str(folder / f"{name}.jsonl"), "output_jsonl_fpath": str(folder / "o.jsonl"),
            "agent_name": "a", **VALUES[values]}


@pytest.fixture(scope="module")
def reference_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, str], list]]:
    folder = tmp_path_factory.mktemp("grouping_cases")
    combos = [(name, values) for name in CASES for values in VALUES]
    for name in CASES:
        _write_case(folder, name)
    code = "import sys; sys.argv[1:] = [" + repr(json.dumps([_config(folder, *c) for c in combos])) + "]\n"
    answers = json.loads(run_reference_python(code + REFERENCE_KEYS, folder).strip().splitlines()[-1])
    return folder, dict(zip(combos, answers))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("values", list(VALUES))
def test_keys_equal_nemo_gym_preprocessing(reference_keys, name: str, values: str) -> None:
    folder, answers = reference_keys
    config = _config(folder, name, values)
    _, ours = _ours(folder, Path(config.pop("input_jsonl_fpath")), **{k: v for k, v in config.items()
                                                                        if k != "output_jsonl_fpath"})
    assert sorted(ours) == sorted(answers[(name, values)])
    assert len({(task, rollout) for task, rollout, *_ in ours}) == len(ours)


def test_plan_counts_tasks_rows_and_widest_task(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(CASES["repeats_and_colliding_caller_index"]) + b"\n")
    plan, _ = _ours(tmp_path, source, agent_name="a", num_repeats=2)
    assert (plan.rows, plan.tasks, plan.repeated_rows, plan.rollouts_per_task) == (9, 4, 5, 8)


def test_shards_split_tasks_and_keep_rollout_numbering(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(CASES["repeats_and_colliding_caller_index"]) + b"\n")
    _, whole = _ours(tmp_path, source, agent_name="a", num_repeats=2)
    parts = [_ours(tmp_path, source, agent_name="a", num_repeats=2, num_shards=3, shard_index=i) for i in range(3)]
    assert sorted(row for _, rows in parts for row in rows) == sorted(whole)
    assert sum(plan.shard_tasks for plan, _ in parts) == parts[0][0].tasks == 4


def test_grouping_survives_the_move_to_disk() -> None:
    """Past MEMORY_ENTRIES the maps live in SQLite: a line seen long before still finds its task and count."""
    with TaskGrouper() as grouper:
        first = b'{"n": 0}\n'
        assert grouper.task_index(first, None) == 0 and grouper.take_rollouts(0, 2) == 0
        for n in range(1, MEMORY_ENTRIES * 2 + 10):
            task = grouper.task_index(b'{"n": %d}\n' % n, None)
            grouper.take_rollouts(task, 2)
        assert grouper.task_index(first, None) == 0 and grouper.take_rollouts(0, 2) == 2
        assert grouper.task_index(b'{"n": 5}\n', None) == 5 and grouper.take_rollouts(5, 1) == 2
        assert (grouper.tasks, grouper.repeated_rows, grouper.largest_task) == (MEMORY_ENTRIES * 2 + 10, 2, 4)


PEAK_RSS = """
import io, sys
from pathlib import Path
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import materialize_inputs
source = Path(sys.argv[1])
config = RolloutCollectionConfig.from_mapping({"input_jsonl_fpath": str(source), "output_jsonl_fpath": sys.argv[2],
                                               "agent_name": "a", "num_repeats": 2})
with open(sys.argv[2], "wb") as out:
    plan = materialize_inputs(config, source, "a", {"a"}, None, out)
# VmHWM, not ru_maxrss: that one survives exec and would show the parent's size.
print(plan.rows, plan.tasks, int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) // 1024)
"""


def _peak_rss_mb(tmp_path: Path, rows: int) -> int:
    source = tmp_path / f"in_{rows}.jsonl"
    pad = "x" * 200  # ~250 bytes a row: keeping the rows' text would cost megabytes per 10k rows
    with open(source, "wb") as out:
        for i in range(rows):
            out.write(_line(f"question {i % (rows - rows // 10)} {pad}") + b"\n")  # the last tenth repeats
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, str(source), str(tmp_path / "m.jsonl")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    seen_rows, tasks, peak = map(int, done.stdout.split())
    assert (seen_rows, tasks) == (rows, rows - rows // 10)
    return peak


@pytest.mark.timeout(900)
def test_memory_stays_flat_in_dataset_size(tmp_path: Path) -> None:
    """4x the rows (400k vs 100k, 100 MB vs 25 MB of input) costs no more than a few MB more peak memory."""
    small, large = _peak_rss_mb(tmp_path, 100_000), _peak_rss_mb(tmp_path, 400_000)
    assert large - small < 16, (small, large)


def test_caller_index_beyond_64_bits_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(_line("p") + b"\n" + _line("q", _ng_task_index=1 << 63) + b"\n")
    with pytest.raises(InputDataError,
                       match=r"in.jsonl:2: _ng_task_index must be a non-negative integer below 2\*\*63"):
        _ours(tmp_path, source, agent_name="a")


def test_fingerprint_records_grouping_only_when_lines_repeat(tmp_path: Path) -> None:
    """So an output written before repeated lines were grouped is refused on resume, and others still resume."""
    config = RolloutCollectionConfig.from_mapping({"input_jsonl_fpath": str(tmp_path / "i.jsonl"),
                                                   "output_jsonl_fpath": str(tmp_path / "o.jsonl")})
    assert "grouped_repeated_rows" not in fingerprint(config, "a", InputPlan(repeated_rows=0), None)
    assert fingerprint(config, "a", InputPlan(repeated_rows=3), None)["grouped_repeated_rows"] == 3
