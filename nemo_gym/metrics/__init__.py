"""Rollout metrics computed in the library: the same numbers live (end of ng_collect_rollouts) and offline
(ng_aggregate_rollouts), streamed over the rows with a few numeric columns in memory.

`accumulator` (per-agent columns and their statistics), `estimators` (pass@k, majority@k, bootstrap),
`report` (the HTML report).
"""

from nemo_gym.metrics.accumulator import AgentColumns, AgentMetrics, compact_row, iter_groups
from nemo_gym.metrics.estimators import bootstrap_ci, k_ladder, majority_at_k, pass_at_k

__all__ = [
    "AgentColumns", "AgentMetrics", "bootstrap_ci", "compact_row", "iter_groups", "k_ladder", "majority_at_k",
    "pass_at_k",
]
