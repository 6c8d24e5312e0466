"""`+dry_run=true`: everything a run checks before its first rollout, and the plan it would run, with nothing
started and nothing written.

Every input row is validated (file:line and field on the first bad one, exit 2, as a real run), every row's agent
must be one that runs, and the fingerprint is compared with the output's manifest the way a resume would be.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from nemo_gym import console
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import InputPlan, materialize_inputs
from nemo_gym.rollout_collection.manifest import fingerprint
from nemo_gym.rollout_collection.prompt import PromptConfig
from nemo_gym.rollout_collection.resume_check import check_fresh, config_changes, resume_refusal


def _output_state(config: RolloutCollectionConfig, fp: dict) -> str:
    if not config.resume_from_cache:
        check_fresh(config)
        return "new"
    changes = config_changes(config, fp)
    if changes is None:
        return "new (nothing to resume yet)"
    if changes and not config.resume_ignore_config_change:
        raise resume_refusal(config.output_path, changes)
    return "resumed despite config changes" if changes else "resumed (same run)"


@dataclass(frozen=True)
class CheckedRun:
    plan: InputPlan
    fingerprint: dict
    output_state: str  # what the run would do with its output: "new", "resumed (same run)", ...


def check_collection(config: RolloutCollectionConfig, agents: set[str], prompt: PromptConfig | None,
                     seed_top_level: bool = True) -> CheckedRun:
    """Every check a run makes before its first rollout, writing nothing: each input row against `agents`, and
    the output's state (a fresh run needs an empty output; a resume, the same run's manifest)."""
    with open(os.devnull, "wb") as nowhere:
        plan = materialize_inputs(config, Path(config.input_jsonl_fpath), config.agent_name, agents, prompt, nowhere,
                                  seed_top_level)
    fp = fingerprint(config, config.agent_name, plan, prompt)
    return CheckedRun(plan, fp, _output_state(config, fp))


def plan_collection(config: RolloutCollectionConfig, agents: set[str], prompt: PromptConfig | None,
                    seed_top_level: bool = True) -> InputPlan:
    """Validate the run of `config` against the running `agents` and print what it would do."""
    checked = check_collection(config, agents, prompt, seed_top_level)
    plan, fp, state = checked.plan, checked.fingerprint, checked.output_state
    num_shards, shard_index = config.shard()
    sampled = (f"; a random {config.sample} with +sample_seed={config.sample_seed}"
               if config.sample is not None else "")
    by_agent = ", ".join(f"{agent}: {n}" for agent, n in sorted(plan.rollouts_by_agent.items())) or "none"
    console.say(f"dry run: every input row is valid; nothing was started or written\n"
                f"input: {config.input_jsonl_fpath} ({plan.rows} rows{sampled}, {plan.tasks} tasks)\n"
                f"planned rollouts: {plan.shard_rollouts} (shard {shard_index} of {num_shards}; "
                f"{config.num_samples_in_parallel} in parallel) by agent: {by_agent}\n"
                f"output: {config.output_path} ({state})\n"
                f"fingerprint: {orjson.dumps(fp, option=orjson.OPT_SORT_KEYS).decode()}")
    return plan
