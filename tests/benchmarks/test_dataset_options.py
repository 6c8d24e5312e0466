"""A dataset entry's `num_repeats` and `prompt_config` in ng_e2e_collect_rollouts' input preparation (no servers):
what the prepared and materialized inputs hold, the fingerprint, and errors that name the file and line."""

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from nemo_gym.config.loader import GlobalConfig, load_global_config
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.rollout_collection.config import E2ERolloutCollectionConfig
from nemo_gym.rollout_collection.e2e import collection_config, prepare_split_inputs
from nemo_gym.rollout_collection.inputs import materialize_inputs
from tests.benchmarks.util import ARITHMETIC_AGENT, ARITHMETIC_DATA
from tests.collection.util import read_rows
from tests.helpers.stack import REPO_ROOT

AGENT = ARITHMETIC_AGENT
PREPARED = str(ARITHMETIC_DATA)
MODEL = ["+policy_base_url=http://127.0.0.1:9/v1", "+policy_api_key=EMPTY", "+policy_model_name=m"]


def _configs(datasets: list[dict[str, Any]], *extra: str) -> tuple[E2ERolloutCollectionConfig, GlobalConfig]:
    tree = {AGENT: {"responses_api_agents": {"simple_agent": {"datasets": datasets}}}}
    Path("datasets.yaml").write_text(yaml.safe_dump(tree))
    paths = f"benchmarks/arithmetic/config.yaml,{REPO_ROOT}/configs/vllm_model.yaml,datasets.yaml"
    global_config = load_global_config([f"+config_paths=[{paths}]", *MODEL, "+split=benchmark",
                                        "+output_jsonl_fpath=out/r.jsonl", *extra], cwd=Path.cwd())
    return E2ERolloutCollectionConfig.from_global(global_config), global_config


def _entry(name: str, path: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "type": "benchmark", "jsonl_fpath": path, **options}


def _materialize(datasets: list[dict[str, Any]], *extra: str) -> tuple[list[dict], list[dict], str]:
    """(prepared rows, materialized rows, input sha256) for these dataset entries."""
    config, global_config = _configs(datasets, *extra)
    prepared = prepare_split_inputs(config, global_config)
    collection = collection_config(config, prepared, "http://127.0.0.1:9")
    assert collection.prompt_config is None  # prompts were applied while preparing, per dataset
    out = io.BytesIO()
    plan = materialize_inputs(collection, prepared, None, {AGENT}, None, out)
    return read_rows(prepared), [orjson.loads(line) for line in out.getvalue().splitlines()], plan.input_sha256


def test_each_dataset_gets_its_own_repeats_and_prompt(arithmetic_root: Path) -> None:
    datasets = [_entry("arithmetic", PREPARED, num_repeats=2),
                _entry("bare", "bare.jsonl", prompt_config="prompt.yaml", num_repeats=3),
                {"name": "other", "type": "validation", "jsonl_fpath": "missing.jsonl"}]
    prepared, rollouts, _ = _materialize(datasets, "+num_repeats=5")
    assert [row["_ng_num_repeats"] for row in prepared] == [2] * 8 + [3] * 8
    assert prepared[0]["responses_create_params"]["input"][0]["content"].endswith("Answer with just the number.")
    assert prepared[8]["responses_create_params"]["input"] == [
        {"role": "system", "content": "You are a calculator."}, {"role": "user", "content": "Compute: What is 6 + 6?"}]
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rollouts]
    assert keys == [(t, r) for t in range(8) for r in range(2)] + [(t, r) for t in range(8, 16) for r in range(3)]
    assert not any("_ng_num_repeats" in row for row in rollouts)
    assert {row["agent_ref"]["name"] for row in rollouts} == {AGENT}


def test_the_global_options_apply_where_an_entry_sets_none(arithmetic_root: Path) -> None:
    prepared, rollouts, _ = _materialize([_entry("bare", "bare.jsonl")], "+prompt_config=prompt.yaml",
                                         "+num_repeats=2")
    assert "_ng_num_repeats" not in prepared[0] and len(rollouts) == 16
    assert prepared[0]["responses_create_params"]["input"][1] == {"role": "user", "content": "Compute: What is 6 + 6?"}


def test_a_changed_entry_changes_the_fingerprint(arithmetic_root: Path) -> None:
    entry = _entry("bare", "bare.jsonl", prompt_config="prompt.yaml", num_repeats=3)
    _, _, first = _materialize([entry])
    assert _materialize([entry])[2] == first
    assert _materialize([{**entry, "num_repeats": 4}])[2] != first
    Path("prompt.yaml").write_text('user: "Compute: {question}"\n')
    assert _materialize([entry])[2] != first


def _prepare_error(datasets: list[dict[str, Any]], error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        prepare_split_inputs(*_configs(datasets))
    assert not Path("out/r_benchmark_inputs.jsonl").exists()


def test_bad_entries_and_rows_name_the_file_and_line(arithmetic_root: Path) -> None:
    _prepare_error([_entry("a", PREPARED, num_repeats=0)], ConfigError,
                   r"^num_repeats of a dataset of agent 'arithmetic_simple_agent' \(datasets.yaml:\d+\) must be a "
                   r"positive integer, got 0$")
    _prepare_error([_entry("a", PREPARED, prompt_config="nope.yaml")], ConfigError,
                   r"^prompt_config of dataset 'a' \(datasets.yaml:\d+\): file not found: nope.yaml$")
    _prepare_error([_entry("a", PREPARED, prompt_config="prompt.yaml")], InputDataError,
                   rf"^{PREPARED}:1: row already has responses_create_params.input, which prompt_config of dataset "
                   r"'a' \(datasets.yaml:\d+\) would replace; drop one of them$")
    Path("prompt.yaml").write_text('user: "{operand}"\n')
    _prepare_error([_entry("b", "bare.jsonl", prompt_config="prompt.yaml")], InputDataError,
                   r"^bare.jsonl:1: prompt_config of dataset 'b' .* prompt.yaml uses \{operand\}, which this row lacks")


def test_a_missing_benchmark_file_says_which_benchmark_to_prepare(arithmetic_root: Path) -> None:
    Path(PREPARED).unlink()
    _prepare_error([_entry("arithmetic", PREPARED)], InputDataError,
                   rf"^dataset {PREPARED} of agent 'arithmetic_simple_agent' \(datasets.yaml:\d+\) not found; "
                   r"run ng_prepare_benchmark \+benchmark=arithmetic$")
    _prepare_error([_entry("own", "own.jsonl")], InputDataError, r"own.jsonl .* not found; prepare it first$")


def test_a_rows_own_repeat_count_must_be_a_positive_integer(arithmetic_root: Path) -> None:
    Path("bad.jsonl").write_text('{"responses_create_params": {"input": "q"}, "_ng_num_repeats": 0}\n')
    config, global_config = _configs([_entry("bad", "bad.jsonl")])
    collection = collection_config(config, Path("bad.jsonl"), "http://127.0.0.1:9")
    with pytest.raises(InputDataError, match=r"^bad.jsonl:1: _ng_num_repeats must be a positive integer, got 0$"):
        materialize_inputs(collection, Path("bad.jsonl"), AGENT, {AGENT}, None, io.BytesIO())
