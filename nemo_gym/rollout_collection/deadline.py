"""The drain margin: a run with a deadline starts no rollout that cannot finish before it.

The deadline is `+deadline=` (a time, or a duration from the start) or, under Slurm, the job's own end time as Slurm
reports it, less `+deadline_lead_s`. Before each rollout starts, `DrainMargin.check` compares the time left with the
p95 duration of the last rollouts to finish, a quarter more for a slow one; once it is shorter, no rollout starts,
those in flight finish, and the run ends resumably (the Slurm job script then requeues the task). A rollout still running at the deadline itself is
stopped there and runs again on resume: the margin makes that rare, the deadline makes it bounded.
"""

import math
import os
import re
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from nemo_gym.errors import ConfigError, DownstreamError

WINDOW = 200  # the p95 is that of the last WINDOW rollouts to finish: recent, so it follows a run that slows down
# Room kept beyond the p95: a rollout a quarter slower than most of late still finishes. Draining early wastes a
# slot's time; a rollout cut at the deadline wastes all of its model calls.
MARGIN_FACTOR = 1.25
P95_EVERY_S = 1.0  # the p95 is sorted out at most this often, not once per rollout started
SQUEUE_TIMEOUT_S = 30.0
OFF = "off"
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


@dataclass(frozen=True)
class Deadline:
    """When the run must have stopped (seconds since the epoch), and where that came from, for messages."""

    at: float
    source: str

    def left_s(self) -> float:
        return self.at - time.time()

    def clock(self) -> str:
        return datetime.fromtimestamp(self.at).strftime("%H:%M:%S")


def parse_deadline(text: str, now: float) -> float:
    """`+deadline=`: an ISO 8601 time (local time unless it names a zone), or a duration from `now` (90m, 1h30m,
    3600s, 3600); seconds since the epoch."""
    match = _DURATION.match(text)
    if match and any(match.groups()):
        hours, minutes, seconds = (float(group or 0) for group in match.groups())
        return now + hours * 3600 + minutes * 60 + seconds
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ConfigError(f"{text!r} is neither a time (2026-12-07T18:00:00) nor a duration (90m, 1h30m, "
                          f"3600s); '{OFF}' turns the Slurm job's end time off too") from None


def slurm_end_time(job_id: str) -> float | None:
    """The end time Slurm holds for `job_id` (seconds since the epoch); None for a job without a time limit."""
    try:
        found = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format", "%e"], capture_output=True,
                               text=True, timeout=SQUEUE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DownstreamError(f"cannot ask Slurm when job {job_id} ends (squeue: {exc}); pass +deadline=... "
                              f"or +deadline={OFF}") from None
    lines = found.stdout.split()
    text = lines[0] if lines else ""
    if found.returncode != 0 or not text:
        raise DownstreamError(f"cannot ask Slurm when job {job_id} ends (squeue exited {found.returncode}: "
                              f"{found.stderr.strip()[:200]}); pass +deadline=... or +deadline={OFF}")
    if text in ("N/A", "NONE", "Unknown", "UNLIMITED"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise DownstreamError(f"squeue gave job {job_id}'s end time as {text!r}, which is not a time") from None


def slurm_job() -> str | None:
    """This process's Slurm job as squeue names it: an array task is `<array job>_<task>` (its own SLURM_JOB_ID may
    be the array's, which squeue answers for every task of the array); None outside Slurm."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or None


def find_deadline(deadline: str | None, lead_s: float, now: float | None = None) -> Deadline | None:
    """The run's deadline: `+deadline=`, else the Slurm job's end time (under Slurm), less `lead_s`; None without
    either, or with +deadline=off."""
    now = time.time() if now is None else now
    if deadline is not None:
        if deadline.strip() == OFF:
            return None
        return Deadline(parse_deadline(deadline, now) - lead_s, f"+deadline={deadline}")
    job_id = slurm_job()
    if not job_id:
        return None
    end = slurm_end_time(job_id)
    if end is None:
        return None
    return Deadline(end - lead_s, f"Slurm job {job_id}'s end time, {datetime.fromtimestamp(end):%H:%M:%S}")


class DrainMargin:
    """Says when the run must stop starting rollouts: once the deadline is nearer than the p95 rollout duration."""

    def __init__(self, deadline: Deadline, window: int = WINDOW) -> None:
        self.deadline = deadline
        self._durations: deque[float] = deque(maxlen=window)
        self._p95: float | None = None
        self._p95_at = -math.inf  # time.monotonic() of the last sort

    def observe(self, duration_s: float) -> None:
        """A rollout finished after `duration_s` seconds (its attempts and their backoff included)."""
        self._durations.append(duration_s)

    def p95_s(self) -> float | None:
        """The p95 duration of the last rollouts to finish (as of at most P95_EVERY_S ago); None before the first."""
        now = time.monotonic()
        if self._durations and (self._p95 is None or now - self._p95_at >= P95_EVERY_S):
            ordered = sorted(self._durations)
            self._p95, self._p95_at = ordered[math.ceil(0.95 * len(ordered)) - 1], now
        return self._p95

    def check(self) -> str | None:
        """Before a rollout starts: why it must not (the time left is shorter than MARGIN_FACTOR times the p95
        rollout), else None."""
        left = self.deadline.left_s()
        if left <= 0:
            return f"the deadline {self.deadline.clock()} ({self.deadline.source}) has passed"
        p95 = self.p95_s()
        if p95 is not None and left < MARGIN_FACTOR * p95:
            return (f"{left:.1f} s are left before the deadline {self.deadline.clock()} ({self.deadline.source}), "
                    f"too few for a rollout (p95 of the last {len(self._durations)}: {p95:.1f} s, and a quarter more)")
        return None
