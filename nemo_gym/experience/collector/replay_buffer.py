"""The replay buffer between an asynchronous collector and a trainer: prompt groups tagged with weight versions.

Each entry is one prompt group with the weight version that generated it and the trainer step (target weight
version) it is meant for. A trainer step takes exactly the groups aimed at it, so data generated on version v
trains step v+1 … v+A and every sampled group is at most A versions old.

The trainer API keeps the reference's polling `sample` (None while the step is not complete) and adds
`sample_blocking`, which waits on a condition instead of polling. Both raise the collector's typed stop reason
(`CollectorDiedError`, `DataExhaustedError`, `CollectorShutdownError`) once the step can never be filled, so a
trainer never waits on a producer that is gone. Groups that can no longer be sampled (older than the age limit,
or aimed at a step already trained) are evicted and handed back to the collector (`drain_evicted`), which
re-queues their prompts so they are still trained this epoch.
"""

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from nemo_gym.experience.collector.prompt_source import PendingPrompt
from nemo_gym.experience.errors import CollectionStoppedError, CollectionTimeoutError, DataExhaustedError


@dataclass
class BufferedGroup:
    """One prompt group in the buffer and where it came from."""

    trajectory: Any  # what the producer pushed: a PromptGroupRecord when it is the collector
    generation_weight_version: int
    target_weight_version: int
    prompt: Optional[PendingPrompt] = None  # lets an evicted group's prompt be generated again
    generation_time_s: float = 0.0
    timestamp: float = field(default_factory=time.time)


class ReplayBuffer:
    """Thread-safe store of per-prompt groups; one entry is one prompt with all its generations."""

    def __init__(self, max_size: int) -> None:
        if max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        self.max_size = max_size
        self._cond = threading.Condition()
        self._entries: list[BufferedGroup] = []
        self._evicted: list[BufferedGroup] = []  # evicted, not yet handed back to the producer
        self._highest_sampled_target = -1
        self._producer_stop: Optional[CollectionStoppedError] = None
        self._listeners: list[Callable[[], None]] = []
        self._counters: dict[str, float] = {
            "groups_pushed": 0, "groups_sampled": 0, "groups_evicted": 0,
            "trainer_wait_s_total": 0.0, "trainer_wait_s_last": 0.0,
        }

    # ---- producer side -------------------------------------------------------------------------------------

    def push_with_wait_signal(self, trajectory: Any, weight_version: int, target_weight_version: int, *,
                              prompt: Optional[PendingPrompt] = None, generation_time_s: float = 0.0) -> str:
        """Add one group: "success", or "full" when at capacity (the producer waits and retries)."""
        with self._cond:
            if len(self._entries) >= self.max_size:
                return "full"
            self._entries.append(BufferedGroup(trajectory, weight_version, target_weight_version, prompt,
                                               generation_time_s))
            self._counters["groups_pushed"] += 1
            self._cond.notify_all()
            return "success"

    def has_space(self) -> bool:
        with self._cond:
            return len(self._entries) < self.max_size

    def count_by_target(self) -> dict[int, int]:
        """Groups per target weight version."""
        with self._cond:
            return dict(Counter(e.target_weight_version for e in self._entries))

    @property
    def highest_sampled_target(self) -> int:
        """The highest step a trainer has taken groups for (-1 before the first)."""
        with self._cond:
            return self._highest_sampled_target

    def drain_evicted(self) -> list[BufferedGroup]:
        """Evicted groups not yet handed back; the producer re-queues their prompts.

        Handing some back also lifts a `DataExhaustedError` stop in the same locked step: the producer has
        prompts again, and a trainer must not see "exhausted" between the hand-back and the producer saying so.
        """
        with self._cond:
            evicted, self._evicted = self._evicted, []
            if evicted and isinstance(self._producer_stop, DataExhaustedError):
                self._producer_stop = None
            return evicted

    def fill_holes(self, num_prompt_groups: int, max_age_steps: int, *, current_weight_version: int) -> int:
        """Move groups from the latest targets down into earlier, short ones; returns how many moved.

        For when no more groups will come (the data is exhausted): a permanently failed group otherwise leaves
        its step short for good while a later step holds groups that can never fill it either. Every step from the
        trainer's next one (`current_weight_version`, or the one after the highest sampled) is filled in turn,
        an empty one included, until no later group is left. Moving down is always age-safe (a group aimed at t'
        was generated on a version <= t < t', so t - gen < t' - gen <= A), and is checked anyway. Afterwards at
        most the last target is partial.
        """
        with self._cond:
            moved = 0
            target = max(current_weight_version, self._highest_sampled_target + 1)
            while any(e.target_weight_version > target for e in self._entries):
                while self._count_target_locked(target) < num_prompt_groups:
                    donors = [i for i, e in enumerate(self._entries) if e.target_weight_version > target
                              and 0 <= target - e.generation_weight_version <= max_age_steps]
                    if not donors:
                        break
                    # The latest target's newest group: earlier targets stay as complete as possible.
                    donor = max(donors, key=lambda i: (self._entries[i].target_weight_version, i))
                    self._entries[donor] = replace(self._entries[donor], target_weight_version=target)
                    moved += 1
                target += 1
            if moved:
                self._cond.notify_all()
            return moved

    def set_producer_stop(self, reason: Optional[CollectionStoppedError]) -> None:
        """Say why no more groups will come (None: the producer is running again) and wake waiting trainers."""
        with self._cond:
            self._producer_stop = reason
            self._cond.notify_all()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` (without the buffer's lock) after a sample or clear frees space or evicts groups."""
        with self._cond:
            self._listeners.append(listener)

    def _notify_listeners(self) -> None:
        for listener in list(self._listeners):
            listener()

    # ---- trainer side --------------------------------------------------------------------------------------

    def sample(self, num_prompt_groups: int, current_weight_version: int,
               max_age_steps: int) -> Optional[dict[str, Any]]:
        """Take `num_prompt_groups` groups aimed at `current_weight_version`, FIFO, or None if not enough yet.

        Groups generated before `current_weight_version - max_age_steps`, and groups aimed at an earlier step,
        are evicted first. Returns {"trajectories", "entries", "avg_trajectory_age"}. Raises the producer's
        stop reason when the step can never be filled.
        """
        if num_prompt_groups <= 0:
            raise ValueError(f"num_prompt_groups must be positive, got {num_prompt_groups}")
        with self._cond:
            evicted = self._evict_locked(current_weight_version, max_age_steps)
            result = self._take_locked(num_prompt_groups, current_weight_version, max_age_steps)
            if result is None:
                self._raise_if_stopped_locked(num_prompt_groups, current_weight_version)
        if evicted or result is not None:
            self._notify_listeners()
        return result

    def sample_blocking(self, num_prompt_groups: int, current_weight_version: int, max_age_steps: int,
                        timeout_s: Optional[float] = None) -> dict[str, Any]:
        """Like `sample`, but wait until the step is complete; raises `CollectionTimeoutError` after `timeout_s`
        (None: wait until the step is filled or the producer stops) and the producer's stop reason if it stops."""
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        try:
            while True:
                result = self.sample(num_prompt_groups, current_weight_version, max_age_steps)
                if result is not None:
                    return result
                with self._cond:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise CollectionTimeoutError(
                            f"step {current_weight_version} still has "
                            f"{self._count_target_locked(current_weight_version)}/{num_prompt_groups} groups after "
                            f"{timeout_s}s; groups per target: {self._debug_counts_locked()}")
                    # Re-checked under the lock: a push between `sample` and here is seen, never slept through.
                    if not self._could_change_locked(num_prompt_groups, current_weight_version, max_age_steps):
                        self._cond.wait(remaining)
        finally:
            with self._cond:
                waited = time.monotonic() - started
                self._counters["trainer_wait_s_total"] += waited
                self._counters["trainer_wait_s_last"] = waited

    # ---- internals -----------------------------------------------------------------------------------------

    def _evict_locked(self, current: int, max_age_steps: int) -> int:
        min_valid = current - max_age_steps
        keep: list[BufferedGroup] = []
        gone: list[BufferedGroup] = []
        for entry in self._entries:
            too_old = entry.generation_weight_version < min_valid
            (gone if too_old or entry.target_weight_version < current else keep).append(entry)
        if gone:
            self._entries = keep
            self._evicted.extend(e for e in gone if e.prompt is not None)
            self._counters["groups_evicted"] += len(gone)
        return len(gone)

    def _intended_locked(self, current: int, max_age_steps: int) -> list[int]:
        return [i for i, e in enumerate(self._entries)
                if e.target_weight_version == current
                and current - max_age_steps <= e.generation_weight_version <= current]

    def _take_locked(self, n: int, current: int, max_age_steps: int) -> Optional[dict[str, Any]]:
        intended = self._intended_locked(current, max_age_steps)
        if len(intended) < n:
            return None
        selected = set(intended[:n])
        taken = [e for i, e in enumerate(self._entries) if i in selected]
        self._entries = [e for i, e in enumerate(self._entries) if i not in selected]
        self._highest_sampled_target = max(self._highest_sampled_target, current)
        self._counters["groups_sampled"] += n
        ages = [current - e.generation_weight_version for e in taken]
        return {"trajectories": [e.trajectory for e in taken], "entries": taken,
                "avg_trajectory_age": sum(ages) / len(ages)}

    def _could_change_locked(self, n: int, current: int, max_age_steps: int) -> bool:
        return len(self._intended_locked(current, max_age_steps)) >= n or self._final_stop_locked() is not None

    def _final_stop_locked(self) -> Optional[CollectionStoppedError]:
        stop = self._producer_stop
        if isinstance(stop, DataExhaustedError) and self._evicted:
            # Evicted prompts are about to be re-queued: the producer is not out of data after all.
            return None
        return stop

    def _raise_if_stopped_locked(self, n: int, current: int) -> None:
        stop = self._final_stop_locked()
        if stop is None:
            return
        message = (f"{stop}; step {current} has {self._count_target_locked(current)}/{n} groups "
                   f"(groups per target: {self._debug_counts_locked()})")
        if isinstance(stop, DataExhaustedError):
            untrained = tuple(e.prompt.key for e in self._entries
                              if e.target_weight_version >= current and e.prompt is not None)
            if untrained:
                message += f"; never trained, as the step cannot be filled: prompts (epoch, idx) {list(untrained)}"
            raise DataExhaustedError(message, untrained_prompts=untrained) from stop
        raise type(stop)(message) from stop

    def _count_target_locked(self, target: int) -> int:
        return sum(1 for e in self._entries if e.target_weight_version == target)

    def _debug_counts_locked(self) -> dict[int, int]:
        return dict(sorted(Counter(e.target_weight_version for e in self._entries).items()))

    # ---- reference-compatible inspection and state ---------------------------------------------------------

    def size(self) -> int:
        with self._cond:
            return len(self._entries)

    def clear(self) -> None:
        """Drop every entry (not counted as evicted, and not handed back for regeneration)."""
        with self._cond:
            self._entries.clear()
            self._cond.notify_all()
        self._notify_listeners()

    def get_existing_target_weights(self) -> set[int]:
        with self._cond:
            return {e.target_weight_version for e in self._entries}

    def get_trajectories_needed(self, target_step: int, num_prompts_per_step: int) -> int:
        """Groups step `target_step` still lacks (0 once it can be sampled)."""
        with self._cond:
            return max(0, num_prompts_per_step - self._count_target_locked(target_step))

    def has_complete_batch(self, target_step: int, num_prompts_per_step: int) -> bool:
        """Whether step `target_step` holds its `num_prompts_per_step` groups (the reference trainer's start wait)."""
        return self.get_trajectories_needed(target_step, num_prompts_per_step) == 0

    def get_debug_info(self) -> dict[str, Any]:
        with self._cond:
            return {
                "total_trajectories": len(self._entries),
                "trajectory_versions": [e.generation_weight_version for e in self._entries],
                "target_weight_versions": [e.target_weight_version for e in self._entries],
                "max_size": self.max_size,
            }

    def get_metrics(self) -> dict[str, Any]:
        """Counters a trainer can log, and the groups held per target version."""
        with self._cond:
            return {**self._counters, "buffer_size": len(self._entries),
                    "buffer_size_per_target": self._debug_counts_locked()}

    def state_dict(self) -> dict[str, Any]:
        with self._cond:
            return {"entries": list(self._entries), "evicted": list(self._evicted),
                    "highest_sampled_target": self._highest_sampled_target, "counters": dict(self._counters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._cond:
            self._entries = list(state["entries"])
            self._evicted = list(state["evicted"])
            self._highest_sampled_target = state["highest_sampled_target"]
            self._counters.update(state["counters"])
            self._cond.notify_all()
        self._notify_listeners()
