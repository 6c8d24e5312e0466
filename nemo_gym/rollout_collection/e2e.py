"""ng_e2e_collect_rollouts: prepare the inputs of one split, start every server, collect, aggregate, stop.

The inputs are the union of every agent's datasets of that split, each row tagged with its agent; they are
prepared into one file next to the output before any server starts, so a bad dataset fails in a second, and a
resumed run finds the same file (same fingerprint) again.
"""

import dataclasses
import os
import time
from pathlib import Path
from typing import BinaryIO

import orjson

from nemo_gym.config.loader import GlobalConfig
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.rollout_collection.collect import AGENT_KIND, CollectionSummary, collect_rollouts
from nemo_gym.rollout_collection.config import (
    E2ERolloutCollectionConfig,
    RolloutCollectionConfig,
    SharedRolloutCollectionConfig,
)
from nemo_gym.rollout_collection.keys import AGENT_REF
from nemo_gym.rollout_collection.runner import run_async
from nemo_gym.server.supervisor import Supervisor


def split_datasets(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> list[tuple[str, Path]]:
    """(agent name, dataset file) for every dataset of `config.split`, in config order."""
    found: list[tuple[str, Path]] = []
    types_seen: set[str] = set()
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
                found.append((spec.name, Path(str(dataset["jsonl_fpath"]))))
    if not found:
        seen = ", ".join(sorted(types_seen)) or "none"
        raise ConfigError(f"no agent in the configs has a dataset of type '{config.split}' (dataset types: {seen})")
    return found


def prepare_split_inputs(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> Path:
    """Write (or, with reuse_existing_data_preparation, reuse) the split's input file; returns its path."""
    dest = config.prepared_inputs_fpath
    if config.reuse_existing_data_preparation and dest.is_file():
        print(f"reusing prepared {config.split} inputs {dest}", flush=True)
        return dest
    datasets = split_datasets(config, global_config)
    for agent, path in datasets:
        if not path.is_file():
            raise InputDataError(f"dataset {path} of agent '{agent}' not found (prepare it first)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb", buffering=1 << 20) as out:
            for agent, path in datasets:
                _copy_tagged(path, agent, out)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"prepared {config.split} inputs from {len(datasets)} dataset(s): {dest}", flush=True)
    return dest


def _copy_tagged(path: Path, agent: str, out: BinaryIO) -> None:
    with open(path, "rb") as file:
        for line_no, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InputDataError(f"{path}:{line_no}: malformed JSON ({exc})") from None
            if not isinstance(row, dict):
                raise InputDataError(f"{path}:{line_no}: a row must be a JSON object")
            row.setdefault(AGENT_REF, {"name": agent})
            out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


def collection_config(config: E2ERolloutCollectionConfig, inputs: Path, head_url: str) -> RolloutCollectionConfig:
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(SharedRolloutCollectionConfig)}
    shared["head_server_url"] = head_url
    return RolloutCollectionConfig(**shared, input_jsonl_fpath=str(inputs))


def e2e_collect_rollouts(config: E2ERolloutCollectionConfig, global_config: GlobalConfig) -> CollectionSummary:
    inputs = prepare_split_inputs(config, global_config)
    log_dir = Path(config.log_dir or Path("ng_logs") / time.strftime("%Y%m%d-%H%M%S"))
    supervisor = Supervisor(global_config, log_dir)
    try:
        supervisor.start()
        print(f"starting {len(supervisor.processes)} servers (logs in {log_dir}) ...", flush=True)
        supervisor.wait_healthy()
        return run_async(collect_rollouts(collection_config(config, inputs, supervisor.head_url)))
    finally:
        supervisor.stop()
        print("all servers stopped", flush=True)
