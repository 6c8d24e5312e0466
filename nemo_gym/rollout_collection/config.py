"""The configs of ng_collect_rollouts, ng_e2e_collect_rollouts and ng_aggregate_rollouts.

Built from the merged global config (top-level `+key=value` overrides) as typed settings (nemo_gym.config.typed),
so a bad value fails before any server is called, naming the field, what it should be and where it was set.
Field names and meanings follow NeMo Gym's; where a value means something there (`limit: 0`,
`num_samples_in_parallel: null`), it means the same here. The asynchronous collector's settings are the other tree
(`experience/collector/config.py`, which says why the two stay apart).
"""

import os
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from nemo_gym.config.global_settings import HeadServerSettings, head_server
from nemo_gym.config.loader import COMMAND_LINE, GlobalConfig
from nemo_gym.config.timeouts import ROLLOUT_TIMEOUT_S, VERIFY_TIMEOUT_S
from nemo_gym.config.typed import FilePath, Settings, Text, build, check_unknown_keys
from nemo_gym.errors import ConfigError
from nemo_gym.rollout_collection.deadline import OFF, parse_deadline
from nemo_gym.run_files.paths import RunPaths

REPEATS_DEFAULT_KEY = "_default"
DEFAULT_NUM_SAMPLES_IN_PARALLEL = 256  # vLLM's default max_num_seqs: enough to keep one replica saturated

C = TypeVar("C", bound="_FromGlobal")


class _FromGlobal(Settings):
    """Built from the global config's top-level keys; a command-line key a typo away from a field is refused."""

    @classmethod
    def from_global(cls: type[C], config: GlobalConfig) -> C:
        command_line = [s for s in config.sources if s.name == COMMAND_LINE]
        for source in command_line:
            check_unknown_keys(cls, [str(k) for k in source.cfg.keys()], "near_miss", lambda f: f"+{f}",
                               lambda f: None)
        where = partial(_set_in, config)
        extra: dict[str, Any] = {} if "head_server_url" in config.values else {"head_server_url": head_server(config.values, where).url}
        return build(cls, config.values, where=where, **extra)

    @classmethod
    def from_mapping(cls: type[C], values: dict[str, Any], **extra: Any) -> C:
        return build(cls, values, **extra)


def _set_in(config: GlobalConfig, field: str) -> str | None:
    where = config.source_of(field)
    return None if where == COMMAND_LINE else f"set in {where}"


def _default_head_url() -> str:
    return HeadServerSettings().url


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


class _WritesRun(_FromGlobal):
    """A command that writes a run: its rollouts file and, beside it, the sidecars (nemo_gym.run_files.RunPaths)."""

    output_jsonl_fpath: Text
    """The rollouts file (JSONL); its sidecars (_failures.jsonl, _manifest.json, ...) go next to it."""

    @property
    def output_path(self) -> Path:
        return Path(self.output_jsonl_fpath)

    @property
    def run_paths(self) -> RunPaths:
        return RunPaths(self.output_jsonl_fpath)

    @property
    def failures_jsonl_fpath(self) -> Path:
        return self.run_paths.failures

    @property
    def manifest_fpath(self) -> Path:
        return self.run_paths.manifest

    @property
    def aggregate_metrics_fpath(self) -> Path:
        return self.run_paths.aggregate_metrics


class SharedRolloutCollectionConfig(_WritesRun):
    """What every collection command shares: where results go, how many run at once, how failures are handled."""

    num_samples_in_parallel: int | None = Field(DEFAULT_NUM_SAMPLES_IN_PARALLEL, ge=1)
    """The most rollouts in flight at once; null takes the default (NeMo Gym reads null as 'no limit'). With
    adaptive_concurrency the run finds its level below this ceiling; left unset there, the ceiling is 16384."""
    adaptive_concurrency: bool = True
    """Find the level while the run goes: in front of vLLM, from the capacity it reports, following its queue
    (rollout_collection/engine_level.py); elsewhere from 64, raised while the throughput rises with it, held at the
    knee (rollout_collection/knee.py); a run of fewer than 128 rollouts starts with all of them in flight; cut by 30%
    when a rollout fails as rate_limited. False keeps exactly num_samples_in_parallel in flight."""
    materialized_jsonl_fpath: FilePath | None = None
    """Where the expanded inputs (one line per rollout) are written; default <output stem>_materialized_inputs.jsonl."""
    responses_create_params: dict[str, Any] = Field(default_factory=dict)
    """Overrides merged into every row's responses_create_params, e.g. {temperature: 0.6, max_output_tokens: 512}."""
    disable_aggregation: bool = False
    """Skip the aggregate metrics at the end (shards aggregated later by ng_aggregate_rollouts)."""
    upload_rollouts_to_wandb: bool = False
    """Log the rollouts to a W&B table while they are written (needs wandb_project)."""
    wandb_project: Text | None = None
    """W&B project for upload_rollouts_to_wandb."""
    wandb_name: Text | None = None
    """W&B run name."""
    wandb_entity: Text | None = None
    """W&B entity (team or user)."""
    wandb_chunk_rows: int = Field(500, ge=1)
    """Rollouts per W&B table chunk, logged as soon as they are written."""
    limit: int | None = Field(None, ge=0)
    """Use only the first N input rows; 0 or null means every row (as in NeMo Gym)."""
    sample: int | None = Field(None, ge=1)
    """Use a random N of the input rows (of the first `limit`, if given), the same N for the same sample_seed."""
    sample_seed: int = 0
    """Seed that chooses the +sample rows; both are recorded in the run's manifest."""
    dry_run: bool = False
    """Validate every input row, the agents and the run's fingerprint, print the planned rollouts, and exit 0
    without running any rollout (ng_e2e_collect_rollouts starts no server)."""
    num_repeats: int | dict[str, Any] | None = None
    """Rollouts per row: an integer, or per agent {agent_name: n, _default: n}; null means 1."""
    num_repeats_add_seed: bool = False
    """Give each repeat its own sampling seed (vLLM honours it), so repeats differ reproducibly."""
    prompt_config: Text | None = None
    """Prompt YAML that builds each row's input from its fields."""
    resume_from_cache: bool = False
    """Continue an interrupted run: keep the rollouts already in the output and run only the rest."""
    resume_ignore_config_change: bool = False
    """Resume even though the run's settings changed since it started (the manifest would refuse)."""
    prices_fpath: FilePath | None = None
    """Your price table (YAML or JSON: `models: {name: {input: 2.5, cached_input: 1.25, output: 10}}`, USD per
    million tokens), over the defaults shipped in nemo_gym/model_prices.yaml: it replaces or adds models by name.
    Each model call's cost is recorded in its row; a model in neither table has no cost."""
    max_cost_usd: float | None = Field(None, gt=0)
    """Start no rollout that could take the output's cost past this many USD (spent so far, earlier runs included,
    plus those in flight and this one at the mean cost of a rollout); those in flight finish and the run exits to be
    resumed with a higher budget."""
    num_shards: int | None = None
    """Split the rows into this many shards (default: the SLURM array size, else 1)."""
    shard_index: int | None = None
    """Which shard this process runs, from 0 (default: the SLURM array task, else 0)."""
    max_attempts: int = Field(3, ge=1)
    """Attempts per rollout within one run before it is recorded as failed."""
    max_total_attempts: int = Field(10, ge=1)
    """Attempts per rollout across resumed runs before it is no longer retried."""
    rollout_timeout_s: float = Field(ROLLOUT_TIMEOUT_S, gt=0)
    """Seconds one rollout (one /run call to its agent) may take."""
    retry_backoff_s: float = Field(1.0, ge=0)
    """Seconds before the first retry of a failed rollout (doubling after each)."""
    progress_interval_s: float = Field(10.0, gt=0)
    """Seconds between progress lines."""
    max_failure_rate: float = Field(0.5, gt=0, le=1)
    """The share of the last 100 rollout attempts that may fail: above it the run pauses failure_pause_s, and stops
    if it is still above after the pause (1 never stops)."""
    failure_pause_s: float = Field(30.0, ge=0)
    """Seconds the run pauses (no new attempt starts) when max_failure_rate is crossed."""
    retry_budget: float = Field(0.2, ge=0)
    """Retries of failed rollouts, at most this share of the run's first attempts (plus 10): a failing endpoint gets
    that much extra load at most; beyond it a failed rollout is recorded for a resume without another attempt."""
    replay_model_calls: bool = True
    """Record each model call's reply beside the output while its rollout runs (<stem>_replay.jsonl), so that a
    resumed run answers the calls a stopped rollout had already made from the record instead of the model (and its
    bill). Needs the model servers to reach the output's folder (the same machine, or a shared file system); records
    of rollouts in the output are dropped when a run starts and ends."""
    deadline: Text | None = None
    """When the run must have stopped: a time (2026-12-07T18:00:00, local unless it names a zone) or a duration from
    the start (90m, 1h30m, 3600s). Under Slurm the default is the job's end time, as squeue gives it; 'off' turns
    that off. No rollout starts once the time left is shorter than the p95 rollout of late; those in flight finish,
    and the run exits with status 79 to be resumed (the Slurm job script requeues its task). One still running at the
    deadline is stopped and runs again on resume."""
    deadline_lead_s: float = Field(0.0, ge=0)
    """Stop this many seconds before the deadline (the Slurm job script sets it: its SIGTERM lead, and time to stop
    the servers and requeue)."""
    preflight: bool = True
    """Check every model endpoint before the first rollout (reachable, key accepted, model served); false skips it."""
    head_server_url: Text = Field(default_factory=_default_head_url)
    """The head server that lists the running servers (default: from head_server.host/port, as ng_run uses them)."""

    @field_validator("num_samples_in_parallel", mode="after")
    @classmethod
    def _null_parallel_is_default(cls, value: int | None) -> int:
        return DEFAULT_NUM_SAMPLES_IN_PARALLEL if value is None else value

    @field_validator("deadline", mode="after")
    @classmethod
    def _deadline_form(cls, value: str | None) -> str | None:
        """A malformed deadline is refused with the config, before the run writes anything."""
        if value is not None and value.strip() != OFF:
            try:
                parse_deadline(value, 0.0)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("limit", mode="after")
    @classmethod
    def _zero_limit_is_all(cls, value: int | None) -> int | None:
        return value or None

    @field_validator("num_repeats", mode="after")
    @classmethod
    def _positive_repeats(cls, value: int | dict[str, Any] | None) -> int | dict[str, Any] | None:
        if isinstance(value, dict):
            for agent, n in value.items():
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    raise ValueError(f".{agent} must be a positive integer, got {n!r}")
        elif value is not None and value < 1:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_materialized_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("materialized_jsonl_fpath") is None and "output_jsonl_fpath" in data:
            output = data["output_jsonl_fpath"]
            if isinstance(output, (str, Path)):
                data = {**data, "materialized_jsonl_fpath": RunPaths(output).materialized_inputs}
        return data

    @property
    def materialized_path(self) -> Path:
        """+materialized_jsonl_fpath; `_default_materialized_path` has put it beside the output when unset."""
        assert self.materialized_jsonl_fpath is not None, "filled in from the required +output_jsonl_fpath"
        return self.materialized_jsonl_fpath

    @model_validator(mode="after")
    def _consistent(self) -> "SharedRolloutCollectionConfig":
        if self.output_path.is_dir():
            raise ValueError(f"+output_jsonl_fpath={self.output_jsonl_fpath} is a directory; name a .jsonl file")
        if self.materialized_jsonl_fpath == self.output_path:
            raise ValueError("+materialized_jsonl_fpath must differ from +output_jsonl_fpath")
        if self.upload_rollouts_to_wandb and not self.wandb_project:
            raise ValueError("+upload_rollouts_to_wandb=true needs +wandb_project=... (and optionally +wandb_name, "
                             "+wandb_entity)")
        shards, index = self.shard()
        if shards < 1:
            raise ValueError(f"+num_shards must be at least 1, got {shards}")
        if not 0 <= index < shards:
            raise ValueError(f"+shard_index must be in [0, {shards - 1}] for {shards} shards, got {index}")
        return self

    def repeats_for(self, agent_name: str) -> int:
        """How many rollouts each task of `agent_name` gets: an int for all, or a per-agent dict with `_default`."""
        repeats = self.num_repeats
        if isinstance(repeats, dict):
            repeats = repeats.get(agent_name, repeats.get(REPEATS_DEFAULT_KEY, 1))
        return 1 if repeats is None else repeats

    def shard(self) -> tuple[int, int]:
        """(num_shards, shard_index): explicit options win over the SLURM array environment."""
        slurm_shards, slurm_index = _slurm_shards()
        shards = self.num_shards if self.num_shards is not None else slurm_shards
        index = self.shard_index if self.shard_index is not None else slurm_index
        return shards, index

    @property
    def collect_log_fpath(self) -> Path:
        return self.run_paths.collect_log


class RolloutCollectionConfig(SharedRolloutCollectionConfig):
    """Perform a batch of rollout collection.

    ng_collect_rollouts +agent_name=example_single_tool_call_simple_agent +input_jsonl_fpath=weather_query.jsonl
        +output_jsonl_fpath=weather_rollouts.jsonl +limit=100 +num_repeats=4 +num_samples_in_parallel=10
    """

    input_jsonl_fpath: Text
    """The input rows (JSONL), each with responses_create_params."""
    agent_name: Text | None = None
    """The agent for rows without an agent_ref (default: each row's agent_ref)."""

    @model_validator(mode="after")
    def _inputs_not_overwritten(self) -> "RolloutCollectionConfig":
        if self.materialized_jsonl_fpath == Path(self.input_jsonl_fpath):
            raise ValueError("+materialized_jsonl_fpath must differ from +input_jsonl_fpath")
        return self


class E2ERolloutCollectionConfig(SharedRolloutCollectionConfig):
    """Start every server in the configs, then collect rollouts over each agent's dataset of `split`."""

    split: Literal["train", "validation", "benchmark", "example"]
    """Which datasets of each agent to run (its `datasets` entries of this type)."""
    reuse_existing_data_preparation: bool = False
    """Use the prepared inputs file of an earlier run instead of preparing it again."""
    log_dir: Text | None = None
    """Folder for the servers' logs (default ng_logs/<date-time>)."""

    @property
    def prepared_inputs_fpath(self) -> Path:
        return self.run_paths.prepared_inputs(self.split)


class RolloutAggregationConfig(_FromGlobal):
    """Aggregate metrics across rollout shards produced by ng_collect_rollouts (e.g. one per SLURM array task).

    ng_aggregate_rollouts "+config_paths=[...]" +input_glob='results/rollouts-shard*.jsonl'
        +output_jsonl_fpath=results/rollouts.jsonl
    """

    input_glob: Text
    """Glob (or comma-separated globs) matching the rollout shards."""
    output_jsonl_fpath: Text
    """The merged rollouts file; the metrics go to <stem>_aggregate_metrics.json next to it."""
    merge_shards: bool = True
    """Also write the union of the shards to output_jsonl_fpath."""
    head_server_url: Text = Field(default_factory=_default_head_url)
    """The head server of the running servers (default: from head_server.host/port)."""

    @property
    def aggregate_metrics_fpath(self) -> Path:
        return RunPaths(self.output_jsonl_fpath).aggregate_metrics


class RolloutReverificationConfig(_WritesRun):
    """Verify the rollouts of a finished run again, without the model: each rollout's response goes back to its
    environment's /verify, and the results form a new run (rollouts, failures, metrics) that resumes like a
    collection.

    ng_reverify_rollouts +input_jsonl_fpath=results/rollouts.jsonl +output_jsonl_fpath=results/reverified.jsonl
        +failed_only=true
    """

    input_jsonl_fpath: Text
    """The finished run's rollouts file; its _failures.jsonl and _materialized_inputs.jsonl beside it are read too."""
    input_materialized_jsonl_fpath: FilePath | None = None
    """The finished run's materialized inputs, if not beside its rollouts (its +materialized_jsonl_fpath)."""
    failed_only: bool = False
    """Verify again only the rollouts whose verification failed (e.g. their judge was down) and copy the others as
    they are; by default every rollout is verified again."""
    num_samples_in_parallel: int = Field(DEFAULT_NUM_SAMPLES_IN_PARALLEL, ge=1)
    """Verifications in flight at once."""
    max_attempts: int = Field(3, ge=1)
    """Attempts per verification within one run before it is recorded as failed."""
    max_total_attempts: int = Field(10, ge=1)
    """Attempts per verification across resumed runs before it is no longer retried."""
    verify_timeout_s: float = Field(VERIFY_TIMEOUT_S, gt=0)
    """Seconds one /verify call may take."""
    retry_backoff_s: float = Field(1.0, ge=0)
    """Seconds before the first retry of a failed verification (doubling after each)."""
    progress_interval_s: float = Field(10.0, gt=0)
    """Seconds between progress lines."""
    resume_from_cache: bool = False
    """Continue an interrupted re-verification: keep what the output holds and verify only the rest."""
    disable_aggregation: bool = False
    """Skip the aggregate metrics at the end."""
    head_server_url: Text = Field(default_factory=_default_head_url)
    """The head server of the running servers, environments and agents (default: from head_server.host/port)."""

    @model_validator(mode="after")
    def _distinct_files(self) -> "RolloutReverificationConfig":
        source = RunPaths(self.input_jsonl_fpath)
        taken = {Path(self.input_jsonl_fpath), source.failures, self.source_materialized_fpath}
        if taken & {self.output_path, self.run_paths.failures, self.run_paths.materialized_inputs}:
            raise ValueError(f"+output_jsonl_fpath={self.output_jsonl_fpath} would overwrite the run it re-verifies; "
                             f"name a new file")
        return self

    @property
    def source_materialized_fpath(self) -> Path:
        return Path(self.input_materialized_jsonl_fpath or RunPaths(self.input_jsonl_fpath).materialized_inputs)
