"""Rollout metrics computed in the library: the same numbers live (end of ng_collect_rollouts) and offline
(ng_aggregate_rollouts), streamed over the rows in constant memory (work files on disk).

`accumulator` (per-agent statistics, a block of tasks at a time), `spill` (a field's values on disk, exact median),
`estimators` (pass@k, majority@k, bootstrap), `report` (the HTML report).
"""

from nemo_gym.metrics.accumulator import AgentAccumulator, AgentMetrics, compact_row, iter_groups
from nemo_gym.metrics.estimators import bootstrap_ci, k_ladder, majority_at_k, pass_at_k, pass_at_ks

__all__ = [
    "AgentAccumulator", "AgentMetrics", "bootstrap_ci", "compact_row", "iter_groups", "k_ladder", "majority_at_k",
    "pass_at_k", "pass_at_ks",
]
