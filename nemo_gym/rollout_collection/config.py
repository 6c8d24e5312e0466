"""The configs of ng_collect_rollouts, ng_e2e_collect_rollouts and ng_aggregate_rollouts.

Built from the merged global config (top-level `+key=value` overrides), with every field type-checked up front so a
bad value fails before any server is called, naming the field and what it should be.
"""

import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, TypeVar, Union

from nemo_gym.config.loader import COMMAND_LINE, GlobalConfig
from nemo_gym.errors import ConfigError
from nemo_gym.run_format import (
    AGGREGATE_METRICS_SUFFIX,
    FAILURES_SUFFIX,
    MANIFEST_SUFFIX,
    MATERIALIZED_INPUTS_SUFFIX,
    prepared_inputs_suffix,
    sidecar,
)
from nemo_gym.server.client import head_url_from_config

REPEATS_DEFAULT_KEY = "_default"

C = TypeVar("C", bound="_FromGlobal")


class _FromGlobal:
    """Builds a dataclass from the global config's top-level keys, checking each field's type."""

    @classmethod
    def from_global(cls: type[C], config: GlobalConfig) -> C:
        _refuse_near_miss_keys(cls, config)
        if "head_server_url" in config.values:
            return cls.from_mapping(config.values)
        return cls.from_mapping(config.values, head_server_url=head_url_from_config(config.values))

    @classmethod
    def from_mapping(cls: type[C], values: Mapping[str, Any], **extra: Any) -> C:
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.name in extra:
                kwargs[f.name] = extra[f.name]
            elif f.name in values:
                kwargs[f.name] = _coerce(f.name, values[f.name], hints[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing required option +{f.name}=...")
        instance = cls(**kwargs)
        instance.validate()
        return instance

    def validate(self) -> None:
        """Cross-field checks; subclasses extend."""


def _refuse_near_miss_keys(cls: type, config: GlobalConfig) -> None:
    """A typo such as `+num_repeat=4` would otherwise be silently ignored and the run would be wrong."""
    names = [f.name for f in dataclasses.fields(cls)]
    for source in config.sources:
        if source.name != COMMAND_LINE:
            continue
        for key in source.cfg.keys():
            key = str(key)
            if key in names:
                continue
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.85)
            if close:
                raise ConfigError(f"unknown option +{key}; did you mean +{close[0]}?")


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if _is_optional(hint):
        return f"{_type_name(_non_none(hint))} or null"
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    origin = typing.get_origin(hint) or hint
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}.get(
        origin, str(hint)
    )


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint)


def _non_none(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return Union[tuple(args)] if len(args) > 1 else args[0]


def _coerce(name: str, value: Any, hint: Any) -> Any:
    if value is None and _is_optional(hint):
        return None
    target = _non_none(hint) if _is_optional(hint) else hint
    origin = typing.get_origin(target)
    if origin is Literal:
        if value in typing.get_args(target):
            return value
    elif origin in (Union, types.UnionType):
        for option in typing.get_args(target):
            try:
                return _coerce(name, value, option)
            except ConfigError:
                continue
    elif (origin or target) is dict:
        if isinstance(value, dict):
            return value
    elif target is bool:
        if isinstance(value, bool):
            return value
    elif target is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif target is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif target is str:
        # Hydra parses `+agent_name=123` or `+output_jsonl_fpath=2024` as numbers; they are still valid names.
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"+{name} must be {_type_name(hint)}, got {value!r}")


def _slurm_shards() -> tuple[int, int]:
    """(num_shards, shard_index) of a SLURM array task, or (1, 0) outside one; array ids need not start at 0."""
    count = os.environ.get("SLURM_ARRAY_TASK_COUNT")
    task_id = os.environ.get("SLURM_ARRAY_TASK_ID")
    if not count or task_id is None:
        return 1, 0
    minimum = os.environ.get("SLURM_ARRAY_TASK_MIN", "0")
    try:
        return int(count), int(task_id) - int(minimum)
    except ValueError:
        raise ConfigError(
            f"cannot read the SLURM array environment (SLURM_ARRAY_TASK_COUNT={count}, "
            f"SLURM_ARRAY_TASK_ID={task_id}, SLURM_ARRAY_TASK_MIN={minimum})"
        ) from None


@dataclass(frozen=True, kw_only=True)
class SharedRolloutCollectionConfig(_FromGlobal):
    """What every collection command shares: where results go, how many run at once, how failures are handled."""

    output_jsonl_fpath: str
    num_samples_in_parallel: int = 256  # vLLM's default max_num_seqs: enough to keep one replica saturated
    responses_create_params: dict[str, Any] = field(default_factory=dict)
    disable_aggregation: bool = False
    upload_rollouts_to_wandb: bool = False
    wandb_project: str | None = None
    wandb_name: str | None = None
    wandb_entity: str | None = None
    wandb_chunk_rows: int = 500  # rollouts per W&B table chunk, logged as soon as they are written
    limit: int | None = None
    num_repeats: int | dict[str, Any] | None = None
    num_repeats_add_seed: bool = False
    prompt_config: str | None = None
    resume_from_cache: bool = False
    resume_ignore_config_change: bool = False
    num_shards: int | None = None
    shard_index: int | None = None
    max_attempts: int = 3
    max_total_attempts: int = 10
    rollout_timeout_s: float = 1800.0
    retry_backoff_s: float = 1.0
    progress_interval_s: float = 10.0
    head_server_url: str = "http://127.0.0.1:11000"  # default: from head_server.host/port, as ng_run uses them

    def validate(self) -> None:
        if self.output_path.is_dir():
            raise ConfigError(f"+output_jsonl_fpath={self.output_jsonl_fpath} is a directory; name a .jsonl file")
        if self.num_samples_in_parallel < 1:
            raise ConfigError(f"+num_samples_in_parallel must be at least 1, got {self.num_samples_in_parallel}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"+limit must be at least 1 (or null for all rows), got {self.limit}")
        for name in ("max_attempts", "max_total_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"+{name} must be at least 1, got {getattr(self, name)}")
        for name in ("rollout_timeout_s", "progress_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"+{name} must be positive, got {getattr(self, name)}")
        if self.retry_backoff_s < 0:
            raise ConfigError(f"+retry_backoff_s must not be negative, got {self.retry_backoff_s}")
        self.repeats_for("")  # checks the repeats setting
        if self.upload_rollouts_to_wandb and not self.wandb_project:
            raise ConfigError("+upload_rollouts_to_wandb=true needs +wandb_project=... (and optionally +wandb_name, "
                              "+wandb_entity)")
        shards, index = self.shard()
        if shards < 1:
            raise ConfigError(f"+num_shards must be at least 1, got {shards}")
        if not 0 <= index < shards:
            raise ConfigError(f"+shard_index must be in [0, {shards - 1}] for {shards} shards, got {index}")

    def repeats_for(self, agent_name: str) -> int:
        """How many rollouts each task of `agent_name` gets: an int for all, or a per-agent dict with `_default`."""
        repeats = self.num_repeats
        if isinstance(repeats, dict):
            for agent, n in repeats.items():
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    raise ConfigError(f"+num_repeats.{agent} must be a positive integer, got {n!r}")
            repeats = repeats.get(agent_name, repeats.get(REPEATS_DEFAULT_KEY, 1))
        if repeats is None:
            return 1
        if repeats < 1:
            raise ConfigError(f"+num_repeats must be a positive integer, got {repeats}")
        return repeats

    def shard(self) -> tuple[int, int]:
        """(num_shards, shard_index): explicit options win over the SLURM array environment."""
        slurm_shards, slurm_index = _slurm_shards()
        shards = self.num_shards if self.num_shards is not None else slurm_shards
        index = self.shard_index if self.shard_index is not None else slurm_index
        return shards, index

    @property
    def output_path(self) -> Path:
        return Path(self.output_jsonl_fpath)

    @property
    def materialized_jsonl_fpath(self) -> Path:
        return sidecar(self.output_jsonl_fpath, MATERIALIZED_INPUTS_SUFFIX)

    @property
    def failures_jsonl_fpath(self) -> Path:
        return sidecar(self.output_jsonl_fpath, FAILURES_SUFFIX)

    @property
    def manifest_fpath(self) -> Path:
        return sidecar(self.output_jsonl_fpath, MANIFEST_SUFFIX)

    @property
    def aggregate_metrics_fpath(self) -> Path:
        return aggregate_metrics_path(self.output_jsonl_fpath)


def aggregate_metrics_path(output_jsonl_fpath: str) -> Path:
    return sidecar(output_jsonl_fpath, AGGREGATE_METRICS_SUFFIX)


@dataclass(frozen=True, kw_only=True)
class RolloutCollectionConfig(SharedRolloutCollectionConfig):
    """Perform a batch of rollout collection.

    ng_collect_rollouts +agent_name=example_single_tool_call_simple_agent +input_jsonl_fpath=weather_query.jsonl
        +output_jsonl_fpath=weather_rollouts.jsonl +limit=100 +num_repeats=4 +num_samples_in_parallel=10
    """

    input_jsonl_fpath: str
    agent_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class E2ERolloutCollectionConfig(SharedRolloutCollectionConfig):
    """Start every server in the configs, then collect rollouts over each agent's dataset of `split`."""

    split: Literal["train", "validation", "benchmark", "example"]
    reuse_existing_data_preparation: bool = False
    log_dir: str | None = None

    @property
    def prepared_inputs_fpath(self) -> Path:
        return sidecar(self.output_jsonl_fpath, prepared_inputs_suffix(self.split))


@dataclass(frozen=True, kw_only=True)
class RolloutAggregationConfig(_FromGlobal):
    """Aggregate metrics across rollout shards produced by ng_collect_rollouts (e.g. one per SLURM array task).

    ng_aggregate_rollouts "+config_paths=[...]" +input_glob='results/rollouts-shard*.jsonl'
        +output_jsonl_fpath=results/rollouts.jsonl
    """

    input_glob: str
    output_jsonl_fpath: str
    merge_shards: bool = True
    head_server_url: str = "http://127.0.0.1:11000"

    @property
    def aggregate_metrics_fpath(self) -> Path:
        return aggregate_metrics_path(self.output_jsonl_fpath)
