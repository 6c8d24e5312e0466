"""The rows the fleet benchmark collects: how long prompts are, how many turns a rollout takes, how long each
output runs.

Output lengths are heavy-tailed: lognormal around a median, cut at `max_tokens` (as reasoning RL rollouts are: most
answers are short, a few run to the cap). A turn's length is drawn from a seed that names the rollout and the turn,
so every routing and concurrency setting sees the same rollouts.
"""

import math
import random
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    turns: int  # model calls per rollout
    prompt_tokens: int  # the first user message
    tool_result_tokens: int  # each later turn adds a tool result of this length
    output_median: int
    output_sigma: float  # of the lognormal: 1.0 puts the mean at 1.65x the median, before the cap
    max_tokens: int

    def output_tokens(self, rollout: int, turn: int) -> int:
        """The output length of turn `turn` of rollout `rollout` (the same for every run)."""
        return self.output_tokens_for(zlib.crc32(f"{self.name}/{rollout}/{turn}".encode()))

    def output_tokens_for(self, seed: int) -> int:
        drawn = random.Random(seed).lognormvariate(math.log(self.output_median), self.output_sigma)
        return max(1, min(self.max_tokens, int(drawn)))

    def mean_output_tokens(self, samples: int = 20_000) -> float:
        return sum(self.output_tokens_for(seed) for seed in range(samples)) / samples


SINGLE_TURN = Workload(name="single-turn", turns=1, prompt_tokens=400, tool_result_tokens=0, output_median=400,
                       output_sigma=1.0, max_tokens=4096)
MULTI_TURN = Workload(name="multi-turn", turns=4, prompt_tokens=400, tool_result_tokens=100, output_median=150,
                      output_sigma=1.0, max_tokens=1024)
WORKLOADS = {workload.name: workload for workload in (SINGLE_TURN, MULTI_TURN)}
