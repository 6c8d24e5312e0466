"""The rows the fleet benchmark collects: how long prompts are, how many turns a rollout takes, how long each
output runs.

Output lengths are heavy-tailed: lognormal around a median, cut at `max_tokens` (as reasoning RL rollouts are: most
answers are short, a few run to the cap). A turn's length is drawn from a seed that names the rollout and the turn,
so every routing and concurrency setting sees the same rollouts.
"""

import math
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
        """A lognormal draw that is a function of `seed` alone (Box-Muller on two uniforms hashed from it)."""
        first, second = _uniform(seed, 1), _uniform(seed, 2)
        normal = math.sqrt(-2.0 * math.log(first)) * math.cos(2.0 * math.pi * second)
        drawn = self.output_median * math.exp(self.output_sigma * normal)
        return max(1, min(self.max_tokens, int(drawn)))

    def mean_output_tokens(self, samples: int = 20_000) -> float:
        return sum(self.output_tokens_for(seed) for seed in range(samples)) / samples


def _uniform(seed: int, stream: int) -> float:
    """A number in (0, 1) from `seed` and `stream` (splitmix64's finalizer)."""
    x = (seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03) & _MASK64
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return ((x ^ (x >> 31)) + 0.5) / 2.0**64


_MASK64 = (1 << 64) - 1
SINGLE_TURN = Workload(name="single-turn", turns=1, prompt_tokens=400, tool_result_tokens=0, output_median=400,
                       output_sigma=1.0, max_tokens=4096)
MULTI_TURN = Workload(name="multi-turn", turns=4, prompt_tokens=400, tool_result_tokens=100, output_median=150,
                      output_sigma=1.0, max_tokens=1024)
WORKLOADS = {workload.name: workload for workload in (SINGLE_TURN, MULTI_TURN)}
