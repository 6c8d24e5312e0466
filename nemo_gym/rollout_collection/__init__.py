"""Batch rollout collection: ng_collect_rollouts, ng_aggregate_rollouts and ng_e2e_collect_rollouts as a library.

    summary = await collect_rollouts(RolloutCollectionConfig(input_jsonl_fpath=..., output_jsonl_fpath=..., ...))
"""

from nemo_gym.rollout_collection.aggregate import (
    AggregateResult,
    _expand_input_glob,
    aggregate_rollouts,
    merge_shards,
)
from nemo_gym.rollout_collection.collect import CollectionSummary, collect_rollouts
from nemo_gym.rollout_collection.config import (
    E2ERolloutCollectionConfig,
    RolloutAggregationConfig,
    RolloutCollectionConfig,
    SharedRolloutCollectionConfig,
)
from nemo_gym.rollout_collection.e2e import e2e_collect_rollouts
from nemo_gym.rollout_collection.runner import run_async

__all__ = [
    "AggregateResult",
    "CollectionSummary",
    "E2ERolloutCollectionConfig",
    "RolloutAggregationConfig",
    "RolloutCollectionConfig",
    "SharedRolloutCollectionConfig",
    "_expand_input_glob",
    "aggregate_rollouts",
    "collect_rollouts",
    "e2e_collect_rollouts",
    "merge_shards",
    "run_async",
]
