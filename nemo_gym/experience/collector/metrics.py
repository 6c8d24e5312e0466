"""What the asynchronous collector reports: counters a trainer logs, and the prompt groups it gave up on."""

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class FailedPromptGroup:
    """A prompt whose group failed on every allowed attempt; its slot in the target was refilled by another."""

    epoch: int
    idx: int
    target_weight_version: int
    attempts: int
    error: str  # the last attempt's exception, as "Type: message"


@dataclass
class CollectorMetrics:
    """Counters since the collector started (restored from a checkpoint, they continue)."""

    groups_generated: int = 0
    groups_failed: int = 0  # given up on after max_group_attempts
    group_attempts_failed: int = 0  # every failed attempt, retried or not (timeouts included)
    group_timeouts: int = 0  # attempts cancelled as stragglers
    prompts_requeued: int = 0  # prompts of evicted groups put back to be generated again
    generation_time_s_total: float = 0.0
    generation_time_s_max: float = 0.0
    generation_time_s_last: float = 0.0

    def record_generated(self, seconds: float) -> None:
        self.groups_generated += 1
        self.generation_time_s_total += seconds
        self.generation_time_s_max = max(self.generation_time_s_max, seconds)
        self.generation_time_s_last = seconds

    def as_dict(self) -> dict[str, Any]:
        mean = self.generation_time_s_total / self.groups_generated if self.groups_generated else 0.0
        return {**asdict(self), "generation_time_s_mean": mean}
