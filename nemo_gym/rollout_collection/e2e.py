"""ng_e2e_collect_rollouts: prepare the inputs of one split, start every server, collect, aggregate, stop.

The inputs are the union of every agent's datasets of that split, each row tagged with its agent; they are
prepared into one file next to the output, and a resumed run finds the same file (same fingerprint) again. Every
check that could refuse the run (server settings, the output's state, the W&B login, every prepared row) is made
before any server starts, so a refusal takes a second, not a vLLM cold start. Preparing applies each dataset
entry's options: its `prompt_config` (else +prompt_config) builds the rows' input, and its `num_repeats` is written
into each row as `_ng_num_repeats`, so the prepared file, and with it the run's fingerprint, changes whenever an
entry does.
"""

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from nemo_gym import console
from nemo_gym.benchmark_layout.discover import benchmark_holding
from nemo_gym.config.loader import GlobalConfig
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.jsonl_records import iter_records
from nemo_gym.rollout_collection.collect import AGENT_KIND, CollectionSummary, collect_rollouts
from nemo_gym.rollout_collection.config import (
    E2ERolloutCollectionConfig,
    RolloutCollectionConfig,
    SharedRolloutCollectionConfig,
)
from nemo_gym.rollout_collection.dry_run import check_collection, plan_collection
from nemo_gym.rollout_collection.inputs import shared_index_error
from nemo_gym.rollout_collection.config_preflight import preflight_config
from nemo_gym.rollout_collection.prompt import PromptConfig, PromptFillError, load_prompt_config
from nemo_gym.rollout_collection.resume_check import check_fresh
from nemo_gym.rollout_collection.task_groups import SharedIndexCheck
from nemo_gym.rollout_collection.wandb_upload import require_wandb_login
from nemo_gym.sync_bridge import run_sync
from nemo_gym.run_format import AGENT_REF, CREATE_PARAMS, NUM_REPEATS, TASK_INDEX
from nemo_gym.server.settings_check import check_server_settings
from nemo_gym.server.supervisor import Supervisor


@dataclass(frozen=True)
class SplitDataset:
    """One dataset entry of the split, with its options checked."""

    agent: str
    path: Path
    where: str  # the config file and line of the agent's datasets
    prompt: PromptConfig | None = None
    num_repeats: int | None = None


def _entry_options(agent: str, where: str, dataset: dict[str, Any]) -> tuple[PromptConfig | None, int | None]:
    label = f"prompt_config of dataset '{dataset.get('name', dataset['jsonl_fpath'])}' ({where})"
    prompt_path = dataset.get("prompt_config")
    if prompt_path is not None and not isinstance(prompt_path, str):
        raise ConfigError(f"{label} must be a file path, got {prompt_path!r}")
    repeats = dataset.get("num_repeats")
    if repeats is not None and (type(repeats) is not int or repeats < 1):
        raise ConfigError(f"num_repeats of a dataset of agent '{agent}' ({where}) must be a positive integer, "
                          f"got {repeats!r}")
    return (load_prompt_config(prompt_path, label) if prompt_path else None), repeats


def split_datasets(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> list[SplitDataset]:
    """Every dataset of `config.split`, in config order; +prompt_config applies where an entry sets none."""
    found: list[SplitDataset] = []
    types_seen: set[str] = set()
    default_prompt = load_prompt_config(config.prompt_config) if config.prompt_config else None
    for spec in global_config.servers().values():
        if spec.kind != AGENT_KIND:
            continue
        datasets = spec.settings.get("datasets") or []
        where = global_config.source_of(f"{spec.name}.{spec.kind}.{spec.implementation}.datasets")
        if not isinstance(datasets, list):
            raise ConfigError(f"datasets of agent '{spec.name}' ({where}) must be a list")
        for dataset in datasets:
            if not isinstance(dataset, dict) or not dataset.get("jsonl_fpath") or not dataset.get("type"):
                raise ConfigError(
                    f"each dataset of agent '{spec.name}' ({where}) needs 'type' and 'jsonl_fpath', got {dataset!r}"
                )
            types_seen.add(str(dataset["type"]))
            if dataset["type"] == config.split:
                prompt, repeats = _entry_options(spec.name, where, dataset)
                found.append(SplitDataset(spec.name, Path(str(dataset["jsonl_fpath"])), where,
                                          prompt or default_prompt, repeats))
    if not found:
        seen = ", ".join(sorted(types_seen)) or "none"
        raise ConfigError(f"no agent in the configs has a dataset of type '{config.split}' (dataset types: {seen})")
    return found


def _missing(dataset: SplitDataset) -> InputDataError:
    benchmark = benchmark_holding(dataset.path)
    fix = f"run ng_prepare_benchmark +benchmark={benchmark}" if benchmark else "prepare it first"
    return InputDataError(f"dataset {dataset.path} of agent '{dataset.agent}' ({dataset.where}) not found; {fix}")


def prepare_split_inputs(config: E2ERolloutCollectionConfig, global_config: GlobalConfig,
                         dest: Path | None = None) -> Path:
    """Write (or, with reuse_existing_data_preparation, reuse) the split's input file; returns its path (by default
    next to the output)."""
    dest = dest or config.prepared_inputs_fpath
    if config.reuse_existing_data_preparation and dest.is_file():
        console.say(f"reusing prepared {config.split} inputs {dest}")
        return dest
    datasets = split_datasets(config, global_config)
    for dataset in datasets:
        if not dataset.path.is_file():
            raise _missing(dataset)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb", buffering=1 << 20) as out, SharedIndexCheck() as shared:
            for ordinal, dataset in enumerate(datasets):
                _copy_tagged(dataset, out, _SharedIndexOrigins(datasets, ordinal, shared))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    console.say(f"prepared {config.split} inputs from {len(datasets)} dataset(s): {dest}")
    return dest


@dataclass(frozen=True)
class _SharedIndexOrigins:
    """The shared-index check over every dataset of the split: a row's origin is its dataset and line, so that a
    refusal names both datasets' own files and lines (rows of two datasets may carry one index too)."""

    datasets: list[SplitDataset]
    ordinal: int
    shared: SharedIndexCheck

    def check(self, where: str, row: dict[str, Any]) -> None:
        task = row.get(TASK_INDEX)
        if type(task) is not int:
            return  # no index, or a bad one, which materialize_inputs refuses
        line_no = int(where.rsplit(":", 1)[1])
        first = self.shared.differing_first(task, row, self.ordinal << _LINE_BITS | line_no)
        if first is not None:
            first_where = f"{self.datasets[first >> _LINE_BITS].path}:{first & ((1 << _LINE_BITS) - 1)}"
            raise InputDataError(f"{where}: {shared_index_error(task, first_where)}")


_LINE_BITS = 40  # an origin is (dataset ordinal << 40) | line number


def _copy_tagged(dataset: SplitDataset, out: BinaryIO, origins: _SharedIndexOrigins) -> None:
    """Copy the dataset's rows, tagged with its agent and options; errors name the dataset's own file and line."""
    for where, row in iter_records(dataset.path):
        if dataset.prompt is not None:
            try:
                row[CREATE_PARAMS] = dataset.prompt.create_params(row)
            except PromptFillError as exc:
                raise InputDataError(f"{where}: {exc}") from None
        if dataset.num_repeats is not None:
            row[NUM_REPEATS] = dataset.num_repeats
        row.setdefault(AGENT_REF, {"name": dataset.agent})
        origins.check(where, row)
        out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


def collection_config(config: E2ERolloutCollectionConfig, inputs: Path, head_url: str) -> RolloutCollectionConfig:
    shared = {name: getattr(config, name) for name in SharedRolloutCollectionConfig.model_fields}
    shared["head_server_url"] = head_url
    shared["prompt_config"] = None  # applied while preparing the inputs, per dataset
    return RolloutCollectionConfig(**shared, input_jsonl_fpath=str(inputs))


def _configured_agents(global_config: GlobalConfig) -> set[str]:
    """The agents the servers of the config will run: what the head server will list once they are up."""
    return {spec.name for spec in global_config.servers().values() if spec.kind == AGENT_KIND}


def plan_e2e(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> CollectionSummary:
    """+dry_run=true: check every server's settings and every row of the split against the configured agents, and
    print the plan; the inputs are prepared in a temporary folder and no server starts."""
    check_server_settings(global_config, rollout_timeout_s=config.rollout_timeout_s)
    if config.preflight:
        run_sync(preflight_config(global_config))
    agents = _configured_agents(global_config)
    with tempfile.TemporaryDirectory(prefix="ng_dry_run_") as scratch:
        reuse = config.reuse_existing_data_preparation and config.prepared_inputs_fpath.is_file()
        inputs = prepare_split_inputs(config, global_config,
                                      None if reuse else Path(scratch) / config.prepared_inputs_fpath.name)
        collection = collection_config(config, inputs, "(not started)")
        plan = plan_collection(collection, agents, None)
    return CollectionSummary.planned(collection, plan.shard_rollouts)


def _check_before_start(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> Path:
    """Everything that could refuse the run once its servers were up, checked before any starts (a vLLM cold start
    is minutes): every server's settings, the output's state, the W&B login, and every prepared row against the
    configured agents. Returns the prepared inputs."""
    check_server_settings(global_config, rollout_timeout_s=config.rollout_timeout_s)
    if not config.resume_from_cache:
        check_fresh(config)  # before preparing: a refused rerun leaves the earlier run's prepared inputs as they were
    if config.upload_rollouts_to_wandb:
        require_wandb_login()
    if config.preflight:  # the endpoints the config calls, already running: nothing is started or written first
        run_sync(preflight_config(global_config))
    inputs = prepare_split_inputs(config, global_config)
    check_collection(collection_config(config, inputs, "(not started)"), _configured_agents(global_config), None)
    return inputs


def e2e_collect_rollouts(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> CollectionSummary:
    if config.dry_run:
        return plan_e2e(config, global_config)
    inputs = _check_before_start(config, global_config)
    log_dir = Path(config.log_dir or Path("ng_logs") / time.strftime("%Y%m%d-%H%M%S"))
    supervisor = Supervisor(global_config, log_dir)
    try:
        supervisor.start()
        console.say(f"starting {len(supervisor.processes)} servers (logs in {log_dir}) ...")
        supervisor.wait_healthy()
        return run_sync(collect_rollouts(collection_config(config, inputs, supervisor.head_url)))
    finally:
        supervisor.stop()
        console.say("all servers stopped")
