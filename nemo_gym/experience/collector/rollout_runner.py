"""What the trajectory collector needs of a rollout manager: one prompt in, its group of rollouts out.

Ours (`nemo_gym.experience.rollout_manager.RolloutManager`) is also a `GroupRetrier`: told that the collector's
group attempts are the retry budget, it runs each rollout once. A manager the caller brings (NeMo RL's, a test's)
need only be a `RolloutRunner`, and keeps whatever retries it has.
"""

from typing import Optional, Protocol, runtime_checkable

from nemo_gym.experience.interfaces import DatumSpec, PromptGroupRecord


@runtime_checkable
class RolloutRunner(Protocol):
    async def run_rollout(self, input_sample: DatumSpec) -> PromptGroupRecord: ...


@runtime_checkable
class GroupRetrier(Protocol):
    def retry_by_group(self, group_timeout_s: Optional[float]) -> None:
        """Leave retries to the collector's group attempts; give each rollout at most `group_timeout_s`."""
