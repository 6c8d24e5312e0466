"""The run manifest: a fingerprint of everything that defines which rollouts a run produces.

Resuming appends to an existing output, which is only correct when the run is the same run. The fingerprint is
stored next to the output (nemo_gym.run_files.manifest reads and writes the file) and compared on resume; a
difference is refused, naming each changed field.
"""

import hashlib
import time
from pathlib import Path
from typing import Any

from nemo_gym.errors import NemoGymError
from nemo_gym.rollout_collection.config import SharedRolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import InputPlan
from nemo_gym.rollout_collection.prompt import PromptConfig
from nemo_gym.run_files.manifest import read_manifest
from nemo_gym.run_format import MANIFEST_FINGERPRINT, MANIFEST_SHARD_ROLLOUTS


def fingerprint(config: SharedRolloutCollectionConfig, agent_name: str | None, plan: InputPlan,
                prompt: PromptConfig | None) -> dict[str, Any]:
    num_shards, shard_index = config.shard()
    # Runs that wrote keys before repeated lines were grouped into one task have no such field: refused on resume.
    grouping = {"grouped_repeated_rows": plan.repeated_rows} if plan.repeated_rows else {}
    # Only runs that sample carry these, so a manifest written before +sample existed still compares equal.
    sampling = {"sample": config.sample, "sample_seed": config.sample_seed} if config.sample is not None else {}
    return {
        **grouping,
        **sampling,
        "input_sha256": plan.input_sha256,
        "limit": config.limit,
        "num_repeats": config.num_repeats,
        "num_repeats_add_seed": config.num_repeats_add_seed,
        "prompt_config_sha256": hashlib.sha256(prompt.text.encode()).hexdigest() if prompt else None,
        "responses_create_params": config.responses_create_params,
        "agent_name": agent_name,
        "num_shards": num_shards,
        "shard_index": shard_index,
    }


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One 'field: old -> new' entry per difference."""
    return [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]


def recorded_fingerprint(path: Path) -> dict[str, Any] | None:
    """The fingerprint in the manifest at `path`, or None when there is no manifest."""
    manifest = read_manifest(path)
    if manifest is None:
        return None
    fingerprint = manifest.get(MANIFEST_FINGERPRINT)
    if not isinstance(fingerprint, dict):
        raise NemoGymError(f"{path} has no fingerprint; delete it to start over")
    return fingerprint


def manifest_of(fp: dict[str, Any], input_path: str, plan: InputPlan) -> dict[str, Any]:
    """The manifest of a run with fingerprint `fp`, stamped with the time it is written."""
    return {
        MANIFEST_FINGERPRINT: fp,
        "input_jsonl_fpath": input_path,
        "rows": plan.rows,
        "tasks": plan.tasks,
        "shard_tasks": plan.shard_tasks,
        MANIFEST_SHARD_ROLLOUTS: plan.shard_rollouts,
        "rollouts_by_agent": plan.rollouts_by_agent,
        "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
