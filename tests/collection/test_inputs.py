"""Input validation and expansion, without servers: what the materialized inputs file holds for a given config."""

import io
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import deep_merge, materialize_inputs
from nemo_gym.rollout_collection.prompt import load_prompt_config

AGENTS = {"a", "b"}


def _config(tmp_path: Path, **values) -> RolloutCollectionConfig:
    values = {"input_jsonl_fpath": str(tmp_path / "in.jsonl"), "output_jsonl_fpath": str(tmp_path / "out.jsonl"),
              **values}
    return RolloutCollectionConfig.from_mapping(values)


def _write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows))
    return path


def _expand(tmp_path: Path, rows: list, **values):
    config = _config(tmp_path, **values)
    out = io.BytesIO()
    prompt = load_prompt_config(config.prompt_config) if config.prompt_config else None
    plan = materialize_inputs(config, _write(tmp_path, rows), config.agent_name, AGENTS, prompt, out)
    return plan, [orjson.loads(line) for line in out.getvalue().splitlines()]


def _row(i: int, **extra) -> dict:
    return {"responses_create_params": {"input": f"q{i}", "temperature": 0.5, "metadata": {"x": 1}}, "i": i, **extra}


def test_keys_repeats_limit_seed_and_deep_merged_overrides(tmp_path: Path) -> None:
    overrides = {"temperature": 0.9, "metadata": {"y": 2}}
    plan, rows = _expand(tmp_path, [_row(i) for i in range(5)], agent_name="a", limit=3, num_repeats=2,
                         num_repeats_add_seed=True, responses_create_params=overrides)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert list(rows[0])[:2] == ["_ng_task_index", "_ng_rollout_index"]  # keys first: cheap to scan
    assert rows[3]["responses_create_params"] == {
        "input": "q1", "temperature": 0.9, "metadata": {"x": 1, "y": 2, "extra_body": '{"seed": 1}'}, "seed": 1}
    assert rows[3]["agent_ref"] == {"name": "a"} and rows[3]["i"] == 1
    assert (plan.tasks, plan.shard_rollouts, plan.rollouts_per_task) == (3, 6, 2)


def test_per_agent_repeats_and_row_agent_refs(tmp_path: Path) -> None:
    rows_in = [_row(0), _row(1, agent_ref={"name": "b"}), _row(2)]
    plan, rows = _expand(tmp_path, rows_in, agent_name="a", num_repeats={"_default": 1, "b": 3})
    assert [(r["_ng_task_index"], r["agent_ref"]["name"]) for r in rows] == [
        (0, "a"), (1, "b"), (1, "b"), (1, "b"), (2, "a")]
    assert plan.rollouts_by_agent == {"a": 2, "b": 3} and plan.rollouts_per_task == 3


def test_caller_task_indices_and_blank_lines(tmp_path: Path) -> None:
    rows_in = [_row(0, _ng_task_index=40), b"", b"   ", _row(1, _ng_task_index=7)]
    _, rows = _expand(tmp_path, rows_in, agent_name="a")
    assert [r["_ng_task_index"] for r in rows] == [40, 7]


def test_shards_partition_tasks(tmp_path: Path) -> None:
    rows_in = [_row(i) for i in range(10)]
    seen = []
    for index in range(3):
        plan, rows = _expand(tmp_path, rows_in, agent_name="a", num_shards=3, shard_index=index)
        assert plan.tasks == plan.rows == 10
        seen += [r["_ng_task_index"] for r in rows]
    assert sorted(seen) == list(range(10))


def test_prompt_config_builds_input(tmp_path: Path) -> None:
    (tmp_path / "prompt.yaml").write_text('system: "Be brief."\nuser: "Q: {question} {{literal}}"\n')
    rows_in = [{"question": "2+2?", "responses_create_params": {"temperature": 0}}]
    _, rows = _expand(tmp_path, rows_in, agent_name="a", prompt_config=str(tmp_path / "prompt.yaml"))
    assert rows[0]["responses_create_params"] == {"temperature": 0, "input": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: 2+2? {literal}"}]}


@pytest.mark.parametrize("rows, values, message", [
    ([b'{"responses_create_params": {"input": "x"}}', b"{not json"], {}, "in.jsonl:2: malformed JSON"),
    ([b"[1, 2]"], {}, "in.jsonl:1: a row must be a JSON object"),
    ([{"i": 1}], {}, "in.jsonl:1: missing responses_create_params"),
    ([{"responses_create_params": "hi"}], {}, "in.jsonl:1: responses_create_params must be a JSON object"),
    ([{"responses_create_params": {"temperature": 1}}], {}, "in.jsonl:1: missing responses_create_params.input"),
    ([{"responses_create_params": {"input": 3}}], {}, "in.jsonl:1: responses_create_params.input must be"),
    ([{"responses_create_params": {"input": [1]}}], {}, "responses_create_params.input must be a list of message"),
    ([{"responses_create_params": {"input": "x", "tools": {}}}], {}, "responses_create_params.tools must be a list"),
    ([_row(0), _row(1, agent_ref={"name": "nope"})], {}, "in.jsonl:2: unknown agent 'nope' (running agents: a, b)"),
    ([_row(0, agent_ref="a")], {}, "in.jsonl:1: agent_ref must look like"),
    ([_row(0)], {"agent_name": None}, "in.jsonl:1: row has no agent_ref and no +agent_name"),
    ([], {}, "no rows (the file is empty)"),
    ([b"", b"  "], {}, "no rows (the file is empty)"),
    ([_row(0), _row(0, _ng_task_index=-1)], {}, "in.jsonl:2: _ng_task_index must be a non-negative integer"),
    ([_row(0, _ng_task_index=None)], {},
     "in.jsonl:1: _ng_task_index must be a non-negative integer below 2**63, got None"),
    ([{"responses_create_params": {"input": "x", "temperature": "hot"}}], {},
     "in.jsonl:1: responses_create_params.temperature must be a number or null, got 'hot'"),
    ([_row(0, _ng_task_index="3")], {}, "_ng_task_index must be a non-negative integer"),
])
def test_invalid_rows_name_file_line_and_field(tmp_path: Path, rows, values, message) -> None:
    with pytest.raises(InputDataError, match=None) as info:
        _expand(tmp_path, rows, **{"agent_name": "a", **values})
    assert message in str(info.value)


def test_prompt_config_errors(tmp_path: Path) -> None:
    (tmp_path / "prompt.yaml").write_text("user: 'Q: {question}'\n")
    with pytest.raises(InputDataError, match=r"in.jsonl:1: row already has responses_create_params.input"):
        _expand(tmp_path, [_row(0, question="x")], agent_name="a", prompt_config=str(tmp_path / "prompt.yaml"))
    with pytest.raises(InputDataError, match=r"in.jsonl:1: \+prompt_config .* uses \{question\}, which this row"):
        _expand(tmp_path, [{"x": 1}], agent_name="a", prompt_config=str(tmp_path / "prompt.yaml"))
    (tmp_path / "bad.yaml").write_text("system: hi\n")
    with pytest.raises(ConfigError, match="needs a 'user' template"):
        load_prompt_config(str(tmp_path / "bad.yaml"))


def test_deep_merge_replaces_lists_and_scalars() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert deep_merge(base, {"a": {"c": [3]}, "d": {"e": 1}}) == {"a": {"b": 1, "c": [3]}, "d": {"e": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}
