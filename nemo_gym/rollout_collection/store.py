"""The files a run writes: rollouts and failures as append-only JSONL, one flushed line per finished rollout.

A line is the unit of commit: it reaches the file in one `write` (so a kill -9 loses at most the line being written,
which resume then trims), and a key is done exactly when its line is in the output. The output file is also the
run's lock: two collectors appending to one file would duplicate rollouts, so the second one is refused.
"""

import fcntl
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nemo_gym.errors import NemoGymError
from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.run_files.failures import latest_failures, write_failures
from nemo_gym.run_files.rows import iter_lines, row_key
from nemo_gym.run_format import ROLLOUT_INDEX, TASK_INDEX


class AppendFile:
    """An O_APPEND file written one whole line per `write` call, straight to the kernel (no user-space buffer)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write_line(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def lock_output(path: Path) -> AppendFile:
    """Open the output for appending and hold an exclusive lock on it until the process ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    output = AppendFile(path)
    try:
        fcntl.flock(output.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        output.close()
        raise NemoGymError(
            f"another ng_collect_rollouts is writing {path}; wait for it, or give each run (and each shard) "
            f"its own +output_jsonl_fpath"
        ) from None
    return output


def repair_torn_tail(path: Path) -> int:
    """Drop a last line cut short by a crash (no trailing newline); returns how many bytes were dropped."""
    if not path.is_file():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "r+b") as file:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            return 0
        keep = 0
        block = 1 << 16
        end = size
        while end > 0:
            start = max(0, end - block)
            file.seek(start)
            chunk = file.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        file.truncate(keep)
    return size - keep


@dataclass
class ScanResult:
    done: KeySet
    rows: int = 0
    duplicates: int = 0  # lines whose key appeared earlier in the file
    outside: int = 0  # keys this run's config cannot produce (only after a forced config change)


def scan_done(path: Path, rollouts_per_task: int) -> ScanResult:
    """Read the keys of every rollout already in `path`; a line without a key is corruption, not something to skip."""
    result = ScanResult(done=KeySet(rollouts_per_task))
    for line_no, _, line in iter_lines(path, missing_ok=True):
        key = row_key(line)
        if key is None:
            raise NemoGymError(
                f"{path}:{line_no}: not a rollout row (no integer {TASK_INDEX}/{ROLLOUT_INDEX}); "
                f"the file was changed by something other than ng_collect_rollouts"
            )
        result.rows += 1
        if not result.done.fits(*key):
            result.outside += 1
        elif not result.done.add(*key):
            result.duplicates += 1
    return result


def previous_attempts(path: Path, done: KeySet) -> dict[tuple[int, int], int]:
    """Attempts already spent by earlier runs on each failed key that is not done (its latest record counts)."""
    return {key: record.attempts for key, record in latest_failures([path], done).items()
            if record.attempts is not None}


@dataclass
class Outstanding:
    count: int = 0
    by_class: Counter = field(default_factory=Counter)


def compact_failures(path: Path, done: KeySet) -> Outstanding:
    """Rewrite the failures file to the latest record of each key that is still not done; remove it if none is.

    Memory is proportional to the number of outstanding failures, not to the run.
    """
    latest = latest_failures([path], done)
    write_failures(path, latest)
    return Outstanding(len(latest), Counter(latest[key].failure_class for key in sorted(latest)))
