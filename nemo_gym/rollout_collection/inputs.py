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
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.rollout_collection.config import SharedRolloutCollectionConfig
from nemo_gym.run_files.rows import keyed
from nemo_gym.run_format import AGENT_REF, NUM_REPEATS, ROLLOUT_INDEX, TASK_INDEX
from nemo_gym.run_format import CREATE_PARAMS as RCP
from nemo_gym.rollout_collection.params_types import wrong_field_type
from nemo_gym.rollout_collection.prompt import PromptConfig, PromptFillError
from nemo_gym.rollout_collection.sampling import sampled_positions
from nemo_gym.rollout_collection.task_groups import SharedIndexCheck, TaskGrouper


@dataclass
class InputPlan:
    """What one validation pass learned about the input; small, whatever the file size."""

    input_sha256: str = ""
    rows: int = 0  # input rows in the run (after `limit`), all shards
    tasks: int = 0  # distinct task indices among them
    repeated_rows: int = 0  # rows that joined an earlier row's task (see task_groups)
    shard_tasks: int = 0
    shard_rollouts: int = 0
    rollouts_per_task: int = 1  # the most rollouts of one task: the width of a KeySet over this run
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
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(name, str) or not name:
            raise self.fail(line_no, f'agent_ref must look like {{"name": "<agent>"}}, got {ref!r}')
        return name

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
        wrong = wrong_field_type(params)
        if wrong:
            raise self.fail(line_no, f"{RCP}.{wrong}")
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
        return params

    def repeats(self, line_no: int, row: dict[str, Any], agent: str) -> int:
        """The row's own `_ng_num_repeats` (taken out of the row), else the configured repeats of its agent."""
        own = row.pop(NUM_REPEATS, None)
        if own is None:
            return self.config.repeats_for(agent)
        if type(own) is not int or own < 1:
            raise self.fail(line_no, f"{NUM_REPEATS} must be a positive integer, got {own!r}")
        return own


MAX_TASK_INDEX = 1 << 63  # a signed 64-bit integer, as the task maps store it


def _given_task_index(checker: _RowChecker, line_no: int, row: dict[str, Any],
                      shared: SharedIndexCheck) -> int | None:
    """The row's own `_ng_task_index`, if it sets one (any row may; several rows may share one if they are the same
    row: `shared_index_error`)."""
    if TASK_INDEX not in row:
        return None
    given = row[TASK_INDEX]
    if type(given) is not int or not 0 <= given < MAX_TASK_INDEX:
        raise checker.fail(line_no, f"{TASK_INDEX} must be a non-negative integer below 2**63, got {given!r}")
    first = shared.differing_first(given, row, line_no)
    if first is not None:
        raise checker.fail(line_no, shared_index_error(given, f"{checker.source}:{first}"))
    return given


def shared_index_error(task: int, first: str) -> str:
    """The refusal of a row that carries the `_ng_task_index` of a different row, which was at `first`."""
    return (f"{TASK_INDEX} {task} is also carried by {first}, a different row; rows that share a {TASK_INDEX} "
            f"must be identical (apart from {ROLLOUT_INDEX} and {NUM_REPEATS}): give this row its own index, or "
            f"leave {TASK_INDEX} out to have rows numbered by their content")


def materialize_inputs(config: SharedRolloutCollectionConfig, input_path: Path, default_agent: str | None,
                       known_agents: set[str], prompt: PromptConfig | None, out: BinaryIO,
                       seed_top_level: bool = True) -> InputPlan:
    """Validate every row of `input_path` (up to `limit`), and write this shard's expanded rollouts to `out`.

    `seed_top_level=False` leaves the `num_repeats_add_seed` seed out of the top-level create params (NeMo Gym's
    servers reject it there; they read it from `metadata.extra_body`)."""
    if not input_path.is_file():
        raise InputDataError(f"input file not found: {input_path}")
    wrong = wrong_field_type(config.responses_create_params or {})
    if wrong:
        raise ConfigError(f"+{RCP}.{wrong}")
    checker = _RowChecker(config, str(input_path), default_agent, prompt)
    num_shards, shard_index = config.shard()
    chosen = (sampled_positions(input_path, config.limit, config.sample, config.sample_seed)
              if config.sample is not None else None)
    plan = InputPlan()
    digest = hashlib.sha256()
    seen = 0  # non-blank rows read, chosen or not
    with open(input_path, "rb") as file, TaskGrouper() as grouper, SharedIndexCheck() as shared:
        for line_no, line in enumerate(file, start=1):
            if config.limit is not None and seen >= config.limit:
                break
            digest.update(line)
            if not line.strip():
                continue
            seen += 1
            if chosen is not None and seen - 1 not in chosen:
                continue
            row = checker.parse(line_no, line)
            task = grouper.task_index(line, _given_task_index(checker, line_no, row, shared))
            agent = checker.agent(line_no, row)
            if agent not in known_agents:
                running = ", ".join(sorted(known_agents)) or "none"
                raise checker.fail(line_no, f"unknown agent '{agent}' (running agents: {running})")
            params = checker.create_params(line_no, row)
            repeats = checker.repeats(line_no, row, agent)
            plan.rows += 1
            tasks_before = grouper.tasks
            first = grouper.take_rollouts(task, repeats)
            if task % num_shards != shard_index:
                continue
            plan.shard_tasks += grouper.tasks - tasks_before
            plan.shard_rollouts += repeats
            plan.rollouts_by_agent[agent] = plan.rollouts_by_agent.get(agent, 0) + repeats
            row.setdefault(AGENT_REF, {"name": agent})
            for rollout in range(first, first + repeats):
                try:
                    row[RCP] = with_seed(params, rollout, seed_top_level) if config.num_repeats_add_seed else params
                except ExtraBodyError as exc:
                    raise checker.fail(line_no, f"responses_create_params.{exc}") from None
                out.write(orjson.dumps(keyed(task, rollout, row)))
                out.write(b"\n")
        plan.tasks, plan.repeated_rows = grouper.tasks, grouper.repeated_rows
        plan.rollouts_per_task = max(1, grouper.largest_task)
    if plan.rows == 0:
        raise InputDataError(f"{input_path}: no rows (the file is empty)")
    plan.input_sha256 = digest.hexdigest()
    return plan
