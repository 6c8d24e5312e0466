"""The collector's master config: every default applied by the one parser, every bad value a configuration error
naming its key (the package's ConfigError, also an ExperienceError)."""

from typing import Any

import pytest

from nemo_gym.errors import ConfigError
from nemo_gym.experience.collector import AsyncTrajectoryCollector, ReplayBuffer
from nemo_gym.experience.collector.config import AsyncCollectorConfig, parse_master_config
from nemo_gym.experience.errors import CollectorConfigError, ExperienceError
from tests.experience.collector_fakes import master_config

pytestmark = pytest.mark.timeout(30)


def test_a_minimal_config_gets_every_default() -> None:
    assert parse_master_config(master_config(4, 2)) == AsyncCollectorConfig(
        num_prompts_per_step=4, num_generations_per_prompt=2, max_trajectory_age_steps=2,
        max_total_sequence_length=512, generation_config={"max_new_tokens": 16}, max_rollout_turns=None,
        use_nemo_gym=False, in_flight_weight_updates=False, recompute_kv_cache_after_weight_updates=False,
        max_concurrent_groups=8, group_timeout_s=600.0, max_group_attempts=3, max_consecutive_failures=16,
        max_epochs=None, shutdown_grace_s=10.0)


def test_given_values_win_and_defaults_follow_them() -> None:
    config = master_config(4, 2, max_concurrent_groups=10, group_timeout_s=None, max_group_attempts=1,
                           in_flight_weight_updates=True, shutdown_grace_s=0)
    config["grpo"].update(max_rollout_turns=3, max_num_epochs=2)
    config["env"] = {"should_use_nemo_gym": True}
    parsed = parse_master_config(config)
    assert (parsed.max_concurrent_groups, parsed.max_consecutive_failures, parsed.group_timeout_s) == (10, 20, None)
    assert (parsed.max_group_attempts, parsed.in_flight_weight_updates, parsed.shutdown_grace_s) == (1, True, 0)
    assert (parsed.max_rollout_turns, parsed.use_nemo_gym, parsed.max_epochs) == (3, True, 2)


def test_async_max_epochs_wins_over_max_num_epochs_even_as_null() -> None:
    config = master_config(4, 2, max_epochs=None)
    config["grpo"]["max_num_epochs"] = 2
    assert parse_master_config(config).max_epochs is None  # null: endless
    config["grpo"]["async_grpo"]["max_epochs"] = 5
    assert parse_master_config(config).max_epochs == 5


def _parent(config: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """The section holding dotted `key`, and the key's last part."""
    *sections, last = key.split(".")
    for section in sections:
        config = config[section]
    return config, last


@pytest.mark.parametrize("key, value, says", [
    ("grpo.async_grpo.max_trajectory_age_steps", 0, "must be an integer >= 1, got 0"),
    ("grpo.num_prompts_per_step", 2.5, "must be an integer >= 1, got 2.5"),
    ("grpo.num_generations_per_prompt", True, "must be an integer >= 1, got True"),
    ("grpo.async_grpo.max_concurrent_groups", 0, "must be an integer >= 1 or null, got 0"),
    ("grpo.async_grpo.group_timeout_s", -1, "must be a positive number or null, got -1"),
    ("grpo.async_grpo.group_timeout_s", "600", "must be a positive number or null, got '600'"),
    ("grpo.async_grpo.shutdown_grace_s", None, "must not be null"),
    ("grpo.async_grpo.in_flight_weight_updates", "yes", "must be true or false, got 'yes'"),
    ("grpo.async_grpo.max_epochs", 0, "must be an integer >= 1 or null, got 0"),
    ("grpo.max_rollout_turns", 0, "must be an integer >= 1 or null, got 0"),
    ("policy.generation", ["max_new_tokens"], "must be a mapping, got ['max_new_tokens']"),
    ("env.should_use_nemo_gym", 1, "must be true or false, got 1"),
    ("grpo.async_grpo", None, "must not be null"),
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


@pytest.mark.parametrize("key", ["grpo", "grpo.async_grpo", "grpo.num_prompts_per_step",
                                 "grpo.async_grpo.max_trajectory_age_steps", "policy.max_total_sequence_length"])
def test_a_missing_required_key_is_named(key: str) -> None:
    config = master_config(4, 2)
    section, last = _parent(config, key)
    del section[last]
    with pytest.raises(CollectorConfigError, match=f"^master config: missing required key {key}$"):
        parse_master_config(config)


def test_the_collector_refuses_a_bad_master_config_with_the_config_error() -> None:
    with pytest.raises(ConfigError, match="grpo.async_grpo.max_group_attempts must be an integer >= 1, got 0"):
        AsyncTrajectoryCollector(None, None, {}, master_config(4, 2, max_group_attempts=0), ReplayBuffer(12),
                                 rollout_manager=object())
