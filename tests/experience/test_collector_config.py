"""The collector's master config: pydantic models under NeMo RL's key names, every default applied by the one parser,
every bad value a configuration error naming its dotted key (the package's ConfigError, also an ExperienceError)."""

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from nemo_gym.errors import ConfigError
from nemo_gym.experience.collector import AsyncTrajectoryCollector, ReplayBuffer
from nemo_gym.experience.collector.config import MasterConfig, parse_master_config
from nemo_gym.experience.errors import CollectorConfigError, ExperienceError
from tests.experience.collector_fakes import master_config

pytestmark = pytest.mark.timeout(30)


def test_a_minimal_config_gets_every_default() -> None:
    parsed = parse_master_config(master_config(4, 2))
    assert parsed.grpo.async_grpo.model_dump() == {
        "max_trajectory_age_steps": 2, "in_flight_weight_updates": False,
        "recompute_kv_cache_after_weight_updates": False, "max_concurrent_groups": None, "group_timeout_s": 600.0,
        "max_group_attempts": 3, "max_consecutive_failures": None, "max_epochs": None, "shutdown_grace_s": 10.0}
    assert parsed.grpo.model_dump(exclude={"async_grpo"}) == {
        "num_prompts_per_step": 4, "num_generations_per_prompt": 2, "max_rollout_turns": None, "max_num_epochs": None}
    assert parsed.policy.model_dump() == {"max_total_sequence_length": 512, "generation": {"max_new_tokens": 16}}
    assert parsed.env.should_use_nemo_gym is False
    # The defaults that follow other keys: P x A groups at once, two such waves of failures, 4 x (2 + 1) buffered.
    grpo = parsed.grpo
    assert (grpo.concurrent_groups, grpo.consecutive_failures_limit, grpo.epochs, grpo.min_buffer_size) == (
        8, 16, None, 12)


def test_given_values_win_and_defaults_follow_them() -> None:
    config = master_config(4, 2, max_concurrent_groups=10, group_timeout_s=None, max_group_attempts=1,
                           in_flight_weight_updates=True, shutdown_grace_s=0)
    config["grpo"].update(max_rollout_turns=3, max_num_epochs=2)
    config["env"] = {"should_use_nemo_gym": True}
    parsed = parse_master_config(config)
    grpo, async_grpo = parsed.grpo, parsed.grpo.async_grpo
    assert (grpo.concurrent_groups, grpo.consecutive_failures_limit, async_grpo.group_timeout_s) == (10, 20, None)
    assert (async_grpo.max_group_attempts, async_grpo.in_flight_weight_updates, async_grpo.shutdown_grace_s) == (
        1, True, 0)
    assert (grpo.max_rollout_turns, parsed.env.should_use_nemo_gym, grpo.epochs) == (3, True, 2)


def test_async_max_epochs_wins_over_max_num_epochs_even_as_null() -> None:
    config = master_config(4, 2, max_epochs=None)
    config["grpo"]["max_num_epochs"] = 2
    assert parse_master_config(config).grpo.epochs is None  # null: endless
    config["grpo"]["async_grpo"]["max_epochs"] = 5
    assert parse_master_config(config).grpo.epochs == 5


def test_the_rest_of_a_nemo_rl_config_is_left_alone() -> None:
    config = master_config(4, 2, enabled=True)  # NeMo RL's own async_grpo switch
    config["grpo"].update(max_num_steps=100, normalize_rewards=True, use_leave_one_out_baseline=True)
    config["policy"].update(model_name="Qwen/Qwen2.5-1.5B", train_global_batch_size=32)
    config.update(loss_fn={"reference_policy_kl_penalty": 0.01}, data={"max_input_seq_length": 256})
    assert parse_master_config(config).grpo.num_prompts_per_step == 4


class _ReadOnlyMapping(Mapping[str, Any]):
    """A Mapping that is not a dict, as OmegaConf's DictConfig."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_sections_may_be_any_mapping() -> None:
    config = master_config(4, 2)
    config["policy"]["generation"] = _ReadOnlyMapping({"temperature": 0.5})
    config["grpo"] = _ReadOnlyMapping(config["grpo"])
    parsed = parse_master_config(_ReadOnlyMapping(config))
    assert parsed.policy.generation == {"temperature": 0.5} and parsed.grpo.num_prompts_per_step == 4


def _parent(config: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """The section holding dotted `key`, and the key's last part."""
    *sections, last = key.split(".")
    for section in sections:
        config = config[section]
    return config, last


@pytest.mark.parametrize("key, value, says", [
    ("grpo.async_grpo.max_trajectory_age_steps", 0, "must be at least 1, got 0"),
    ("grpo.num_prompts_per_step", 2.5, "must be an integer, got 2.5"),
    ("grpo.num_generations_per_prompt", True, "must be an integer, got True"),
    ("grpo.async_grpo.max_concurrent_groups", 0, "must be at least 1, got 0"),
    ("grpo.async_grpo.group_timeout_s", -1, "must be positive, got -1"),
    ("grpo.async_grpo.group_timeout_s", "600", "must be a number or null, got '600'"),
    ("grpo.async_grpo.shutdown_grace_s", None, "must be a number, got None"),
    ("grpo.async_grpo.shutdown_grace_s", -0.5, "must be at least 0.0, got -0.5"),
    ("grpo.async_grpo.in_flight_weight_updates", "yes", "must be true or false, got 'yes'"),
    ("grpo.async_grpo.max_epochs", 0, "must be at least 1, got 0"),
    ("grpo.max_rollout_turns", 0, "must be at least 1, got 0"),
    ("policy.generation", ["max_new_tokens"], "must be a mapping or null, got ['max_new_tokens']"),
    ("env.should_use_nemo_gym", 1, "must be true or false, got 1"),
    ("grpo.async_grpo", None, "must be a mapping, got None"),
])
def test_a_bad_value_is_a_config_error_naming_its_key(key: str, value: Any, says: str) -> None:
    config = master_config(4, 2)
    config["env"] = {}
    section, last = _parent(config, key)
    section[last] = value
    with pytest.raises(CollectorConfigError) as caught:
        parse_master_config(config)
    assert str(caught.value) == f"master config: {key} {says}"
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ExperienceError)


def test_every_bad_key_of_a_section_is_named_at_once() -> None:
    with pytest.raises(CollectorConfigError) as caught:
        parse_master_config(master_config(4, 2, group_timeout_s=-1, max_group_attempts=0))
    assert str(caught.value) == ("master config: grpo.async_grpo.group_timeout_s must be positive, got -1; "
                                 "grpo.async_grpo.max_group_attempts must be at least 1, got 0")


@pytest.mark.parametrize("key", ["grpo", "grpo.async_grpo", "grpo.num_prompts_per_step",
                                 "grpo.async_grpo.max_trajectory_age_steps", "policy.max_total_sequence_length"])
def test_a_missing_required_key_is_named(key: str) -> None:
    config = master_config(4, 2)
    section, last = _parent(config, key)
    del section[last]
    with pytest.raises(CollectorConfigError, match=f"^master config: missing required {key}$"):
        parse_master_config(config)


def test_a_misspelt_key_of_ours_is_refused_not_ignored() -> None:
    with pytest.raises(CollectorConfigError, match="unknown option grpo.async_grpo.group_timout_s; did you mean "
                                                   "grpo.async_grpo.group_timeout_s"):
        parse_master_config(master_config(4, 2, group_timout_s=30))


def test_a_master_config_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(CollectorConfigError, match=r"^master config must be a mapping, got \['grpo'\]$"):
        parse_master_config(["grpo"])  # type: ignore[arg-type]


def _models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    yield model
    for field in model.model_fields.values():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _models(field.annotation)


def test_every_key_is_documented_once_by_its_field() -> None:
    undocumented = [f"{m.__name__}.{name}" for m in _models(MasterConfig) for name, field in m.model_fields.items()
                    if not field.description and not (isinstance(field.annotation, type)
                                                      and issubclass(field.annotation, BaseModel))]
    assert undocumented == []


def test_the_collector_refuses_a_bad_master_config_with_the_config_error() -> None:
    with pytest.raises(ConfigError, match="grpo.async_grpo.max_group_attempts must be at least 1, got 0"):
        AsyncTrajectoryCollector(None, None, {}, master_config(4, 2, max_group_attempts=0), ReplayBuffer(12),
                                 rollout_manager=object())
