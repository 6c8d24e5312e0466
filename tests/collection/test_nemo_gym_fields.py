"""Collection options that mean something particular in NeMo Gym mean the same here: `limit: 0`/`null`,
`num_samples_in_parallel: null` and `+materialized_jsonl_fpath`, in a YAML config as NeMo Gym users write them."""

from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError
from nemo_gym.rollout_collection import RolloutCollectionConfig
from nemo_gym.rollout_collection.config import DEFAULT_NUM_SAMPLES_IN_PARALLEL
from tests.collection.conftest import CollectionStack
from tests.collection.util import keys, read_rows, run_cli, sidecar, write_rows


def _config(tmp_path: Path, yaml_text: str) -> RolloutCollectionConfig:
    (tmp_path / "run.yaml").write_text(yaml_text)
    args = ["+config_paths=[run.yaml]", "+input_jsonl_fpath=in.jsonl", "+output_jsonl_fpath=out/r.jsonl"]
    return RolloutCollectionConfig.from_global(load_global_config(args, cwd=tmp_path, require_complete=False))


@pytest.mark.parametrize("text", ["limit: 0\n", "limit: null\n", "num_samples_in_parallel: null\n", "{}\n"])
def test_null_and_zero_take_nemo_gym_meaning(tmp_path: Path, text: str) -> None:
    config = _config(tmp_path, text)
    assert config.limit is None  # every row
    assert config.num_samples_in_parallel == DEFAULT_NUM_SAMPLES_IN_PARALLEL
    assert config.materialized_jsonl_fpath == Path("out/r_materialized_inputs.jsonl")  # NeMo Gym's name


def test_bad_value_in_a_yaml_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "# run settings\nnum_samples_in_parallel: lots\n")
    assert str(info.value) == "+num_samples_in_parallel must be an integer or null, got 'lots' (set in run.yaml:2)"


def test_limit_zero_materialized_path_and_null_parallel_in_a_real_run(collection_stack: CollectionStack,
                                                                      tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 7)
    out = tmp_path / "r.jsonl"
    materialized = tmp_path / "elsewhere" / "inputs.jsonl"
    result = run_cli("collect", collection_stack.args(
        "+agent_name=agent_a", f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={out}", "+limit=0",
        "+num_samples_in_parallel=null", f"+materialized_jsonl_fpath={materialized}"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(keys(out)) == [(t, 0) for t in range(7)]  # limit 0: every row
    assert len(read_rows(materialized)) == 7
    assert not sidecar(out, "_materialized_inputs.jsonl").exists()
    # Seven rollouts never make a round of the automatic level: all of them start at once, as a fixed setting would.
    assert f"(up to {DEFAULT_NUM_SAMPLES_IN_PARALLEL} in parallel, from 7: 7 rollouts, too few to measure a level by" \
        in result.stdout + result.stderr
