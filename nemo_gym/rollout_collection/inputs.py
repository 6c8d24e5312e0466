"""Read, validate and expand the input JSONL in one streaming pass, writing the materialized inputs.

Every row is checked before any rollout starts, so a bad row 90% of the way through a file fails in seconds, not
hours into the run. The pass writes `<stem>_materialized_inputs.jsonl` — one line per rollout of this shard, keys
first — which the runner then streams; nothing about the rows is kept in memory.
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from nemo_gym.compat.extra_body import ExtraBodyError, with_seed
from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.config import SharedRolloutCollectionConfig
from nemo_gym.rollout_collection.keys import AGENT_REF, NUM_REPEATS, TASK_INDEX, KeySet, keyed
from nemo_gym.rollout_collection.keys import CREATE_PARAMS as RCP
from nemo_gym.rollout_collection.prompt import PromptConfig, PromptFillError


@dataclass
class InputPlan:
    """What one validation pass learned about the input; small, whatever the file size."""

    input_sha256: str = ""
    tasks: int = 0  # rows in the run (after `limit`), all shards
    shard_tasks: int = 0
    shard_rollouts: int = 0
    rollouts_per_task: int = 1  # the largest repeat count: the width of a KeySet over this run
    rollouts_by_agent: dict[str, int] = field(default_factory=dict)


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied: nested mappings merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class _RowChecker:
    """Validates and expands one row at a time; errors name the file and line."""

    def __init__(self, config: SharedRolloutCollectionConfig, source: str, default_agent: str | None,
                 prompt: PromptConfig | None) -> None:
        self.config = config
        self.source = source
        self.default_agent = default_agent
        self.prompt = prompt

    def fail(self, line_no: int, message: str) -> InputDataError:
        return InputDataError(f"{self.source}:{line_no}: {message}")

    def parse(self, line_no: int, line: bytes) -> dict[str, Any]:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise self.fail(line_no, f"malformed JSON ({exc})") from None
        if not isinstance(row, dict):
            raise self.fail(line_no, f"a row must be a JSON object, got {type(row).__name__}")
        return row

    def agent(self, line_no: int, row: dict[str, Any]) -> str:
        ref = row.get(AGENT_REF)
        if ref is None:
            if not self.default_agent:
                raise self.fail(line_no, "row has no agent_ref and no +agent_name was given")
            return self.default_agent
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"]:
            raise self.fail(line_no, f'agent_ref must look like {{"name": "<agent>"}}, got {ref!r}')
        return ref["name"]

    def create_params(self, line_no: int, row: dict[str, Any]) -> dict[str, Any]:
        params = row.get(RCP)
        if self.prompt is not None:
            try:
                params = self.prompt.create_params(row)
            except PromptFillError as exc:
                raise self.fail(line_no, str(exc)) from None
        elif params is None:
            raise self.fail(line_no, f"missing {RCP} (or pass +prompt_config to build the input from row fields)")
        elif not isinstance(params, dict):
            raise self.fail(line_no, f"{RCP} must be a JSON object, got {type(params).__name__}")
        if self.config.responses_create_params:
            params = deep_merge(params, self.config.responses_create_params)
        given = params.get("input")
        if given is None:
            raise self.fail(line_no, f"missing {RCP}.input")
        if isinstance(given, list):
            if any(not isinstance(item, dict) for item in given):
                raise self.fail(line_no, f"{RCP}.input must be a list of message objects")
        elif not isinstance(given, str):
            raise self.fail(line_no, f"{RCP}.input must be a string or a list of messages, got {given!r}")
        if "tools" in params and not isinstance(params["tools"], list):
            raise self.fail(line_no, f"{RCP}.tools must be a list")
        return params

    def repeats(self, line_no: int, row: dict[str, Any], agent: str) -> int:
        """The row's own `_ng_num_repeats` (taken out of the row), else the configured repeats of its agent."""
        own = row.pop(NUM_REPEATS, None)
        if own is None:
            return self.config.repeats_for(agent)
        if type(own) is not int or own < 1:
            raise self.fail(line_no, f"{NUM_REPEATS} must be a positive integer, got {own!r}")
        return own


def _task_index(checker: _RowChecker, line_no: int, row: dict[str, Any], position: int,
                caller_indexed: bool, seen: KeySet) -> int:
    given = row.get(TASK_INDEX)
    if caller_indexed != (given is not None):
        raise checker.fail(line_no, f"either every row or no row may set {TASK_INDEX}; this row "
                                    f"{'lacks it' if caller_indexed else 'sets it'}, the first row did not")
    if not caller_indexed:
        return position
    if type(given) is not int or given < 0:
        raise checker.fail(line_no, f"{TASK_INDEX} must be a non-negative integer, got {given!r}")
    if not seen.add(given, 0):
        raise checker.fail(line_no, f"duplicate {TASK_INDEX} {given}: task indices must be unique")
    return given


def materialize_inputs(config: SharedRolloutCollectionConfig, input_path: Path, default_agent: str | None,
                       known_agents: set[str], prompt: PromptConfig | None, out: BinaryIO,
                       seed_top_level: bool = True) -> InputPlan:
    """Validate every row of `input_path` (up to `limit`), and write this shard's expanded rollouts to `out`.

    `seed_top_level=False` leaves the `num_repeats_add_seed` seed out of the top-level create params (NeMo Gym's
    servers reject it there; they read it from `metadata.extra_body`)."""
    if not input_path.is_file():
        raise InputDataError(f"input file not found: {input_path}")
    checker = _RowChecker(config, str(input_path), default_agent, prompt)
    num_shards, shard_index = config.shard()
    plan = InputPlan()
    digest = hashlib.sha256()
    seen_tasks = KeySet(1)
    caller_indexed: bool | None = None
    with open(input_path, "rb") as file:
        for line_no, line in enumerate(file, start=1):
            if config.limit is not None and plan.tasks >= config.limit:
                break
            digest.update(line)
            if not line.strip():
                continue
            row = checker.parse(line_no, line)
            if caller_indexed is None:
                caller_indexed = TASK_INDEX in row
            task = _task_index(checker, line_no, row, plan.tasks, caller_indexed, seen_tasks)
            agent = checker.agent(line_no, row)
            if agent not in known_agents:
                running = ", ".join(sorted(known_agents)) or "none"
                raise checker.fail(line_no, f"unknown agent '{agent}' (running agents: {running})")
            params = checker.create_params(line_no, row)
            repeats = checker.repeats(line_no, row, agent)
            plan.tasks += 1
            plan.rollouts_per_task = max(plan.rollouts_per_task, repeats)
            if task % num_shards != shard_index:
                continue
            plan.shard_tasks += 1
            plan.shard_rollouts += repeats
            plan.rollouts_by_agent[agent] = plan.rollouts_by_agent.get(agent, 0) + repeats
            row.setdefault(AGENT_REF, {"name": agent})
            for rollout in range(repeats):
                try:
                    row[RCP] = with_seed(params, rollout, seed_top_level) if config.num_repeats_add_seed else params
                except ExtraBodyError as exc:
                    raise checker.fail(line_no, f"responses_create_params.{exc}") from None
                out.write(orjson.dumps(keyed(task, rollout, row)))
                out.write(b"\n")
    if plan.tasks == 0:
        raise InputDataError(f"{input_path}: no rows (the file is empty)")
    plan.input_sha256 = digest.hexdigest()
    return plan
