"""What re-verifying a finished run does with each of its rollouts, read from the run's files in key order.

A run's files hold, for every key of its materialized inputs (the rows exactly as the agents got them), one of: a
rollout in the output (verified), a failure record that kept the rollout (its verification failed: the record's
`rollout` field, or, in a NeMo Gym sidecar, the record itself with its `response`), a failure record without one (the
rollout failed before it was verified), or nothing (the run never got to it). Each becomes a `RowAction`:

    verify   the /verify body the agent sent: the materialized row plus the rollout's `response` (and the rollout's
             model calls, `_ng_model_calls`, which the agent adds after /verify and re-verification keeps)
    copy     a verified rollout kept as it is (+failed_only=true)
    carry    a failure that no verification can redo: its record goes to the new failures file as it is
    missing  nothing to re-verify

The files are read in key order (`run_files.key_order`): memory stays flat however many rollouts the run holds.
"""

import os
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, Iterator, Literal, NamedTuple

import orjson

from nemo_gym.errors import InputDataError
from nemo_gym.run_files.failures import latest_failures
from nemo_gym.run_files.key_order import ReadStats, iter_unique_entries
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.run_files.rows import line_number_at
from nemo_gym.run_format import AGENT_REF, FAILED_ROLLOUT, MODEL_CALLS

Action = Literal["verify", "copy", "carry", "missing"]
Key = tuple[int, int]


class RowAction(NamedTuple):
    action: Action
    key: Key
    inputs_line: bytes  # the materialized row
    source_line: bytes  # the rollout row (verify from the output, copy) or the failure record (verify, carry)
    source_path: Path | None  # the file holding `source_line` (None for missing)
    source_offset: int  # where in it

    def where(self) -> str:
        """file:line of `source_line`, for errors (counted only then: it reads the file up to the line)."""
        if self.source_path is None:
            return "(no source file)"
        return f"{self.source_path}:{line_number_at(self.source_path, self.source_offset)}"

    def agent(self) -> str:
        name: str = orjson.loads(self.inputs_line)[AGENT_REF]["name"]  # materializing checked it
        return name

    def verify_body(self) -> bytes:
        """The /verify request of this rollout: what its agent sent (the materialized row and the response)."""
        source = orjson.loads(self.source_line)
        rollout = source.get(FAILED_ROLLOUT) or source
        response = rollout.get("response")
        if not isinstance(response, dict):
            raise InputDataError(f"{self.where()}: the rollout has no 'response' object to verify")
        body = {**orjson.loads(self.inputs_line), "response": response}
        if MODEL_CALLS in rollout:  # the calls that made the response (verify echoes them into the new row)
            body[MODEL_CALLS] = rollout[MODEL_CALLS]
        return orjson.dumps(body, option=orjson.OPT_APPEND_NEWLINE)


def _kept_rollout(record_line: bytes) -> bool:
    """Whether a failure record kept its rollout (ours under `rollout`, NeMo Gym's sidecar row as a whole)."""
    record = orjson.loads(record_line)
    return isinstance(record.get(FAILED_ROLLOUT), dict) or isinstance(record.get("response"), dict)


def plan_steps(rollouts: Path, materialized: Path, failed_only: bool, work_dir: Path | None = None
               ) -> Generator[RowAction, None, None]:
    """One RowAction per key of `materialized`, in key order, from the run whose rollouts file is `rollouts` (the key
    indexes of large files spill to `work_dir`, by default the system's temporary folder)."""
    failures_path = RunPaths(rollouts).failures
    failures = latest_failures([failures_path])
    with closing(iter_unique_entries([rollouts], ReadStats(), work_dir)) as done, \
            closing(iter_unique_entries([materialized], ReadStats(), work_dir)) as inputs, \
            open(failures_path if failures else os.devnull, "rb") as failure_file:
        pending = next(done, None)
        for entry in inputs:
            key = (entry.task, entry.rollout)
            while pending is not None and (pending.task, pending.rollout) < key:
                pending = next(done, None)  # a rollout the inputs do not hold: not this run's
            if pending is not None and (pending.task, pending.rollout) == key:
                yield RowAction("copy" if failed_only else "verify", key, entry.line, pending.line, rollouts,
                           pending.offset)
            elif key in failures:
                record = failures[key]
                line = os.pread(failure_file.fileno(), record.length, record.offset)
                yield RowAction("verify" if _kept_rollout(line) else "carry", key, entry.line, line, failures_path,
                           record.offset)
            else:
                yield RowAction("missing", key, entry.line, b"", None, 0)


@dataclass
class Survey:
    """What a plan holds, counted before anything is written."""

    actions: Counter = field(default_factory=Counter)
    agents: set[str] = field(default_factory=set)  # of the rollouts to verify
    rollouts_per_task: int = 1


def survey(steps: Iterator[RowAction]) -> Survey:
    found = Survey()
    for step in steps:
        found.actions[step.action] += 1
        found.rollouts_per_task = max(found.rollouts_per_task, step.key[1] + 1)
        if step.action == "verify":
            found.agents.add(step.agent())
    return found
