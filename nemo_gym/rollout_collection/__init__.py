"""Batch rollout collection: ng_collect_rollouts, ng_aggregate_rollouts and ng_e2e_collect_rollouts as a library.

    summary = await RolloutCollectionHelper().run_from_config(RolloutCollectionConfig(input_jsonl_fpath=..., ...))
    async for row, result in RolloutCollectionHelper(head_url).run_examples(rows):   # results as they finish
        ...
"""

from typing import TYPE_CHECKING

from nemo_gym.lazy_exports import lazy_exports
from nemo_gym.run_files.paths import expand_input_glob as _expand_input_glob  # NeMo Gym's name for it

if TYPE_CHECKING:
    from nemo_gym.errors import RolloutFailedError
    from nemo_gym.rollout_collection.aggregate import AggregateResult, aggregate_rollouts, merge_shards
    from nemo_gym.rollout_collection.collect import CollectionSummary, collect_rollouts
    from nemo_gym.rollout_collection.config import (
        E2ERolloutCollectionConfig,
        RolloutAggregationConfig,
        RolloutCollectionConfig,
        SharedRolloutCollectionConfig,
    )
    from nemo_gym.rollout_collection.e2e import e2e_collect_rollouts
    from nemo_gym.rollout_collection.helper import (
        EnvironmentMetricsSkipped,
        RolloutAggregationHelper,
        RolloutCollectionHelper,
    )
    from nemo_gym.rollout_collection.rollout import RolloutFailure, RolloutPolicy
    from nemo_gym.rollout_collection.stream import RolloutStream

__all__ = [
    "AggregateResult",
    "CollectionSummary",
    "E2ERolloutCollectionConfig",
    "EnvironmentMetricsSkipped",
    "RolloutAggregationConfig",
    "RolloutAggregationHelper",
    "RolloutCollectionConfig",
    "RolloutCollectionHelper",
    "RolloutFailedError",
    "RolloutFailure",
    "RolloutPolicy",
    "RolloutStream",
    "SharedRolloutCollectionConfig",
    "_expand_input_glob",
    "aggregate_rollouts",
    "collect_rollouts",
    "e2e_collect_rollouts",
    "merge_shards",
]
# Each name is loaded on first use: ng_collect_rollouts then loads neither ng_e2e_collect_rollouts' server classes
# nor a web server.
__getattr__ = lazy_exports(__name__, {
    "RolloutFailedError": "nemo_gym.errors",
    **dict.fromkeys(("AggregateResult", "aggregate_rollouts", "merge_shards"), "nemo_gym.rollout_collection.aggregate"),
    **dict.fromkeys(("CollectionSummary", "collect_rollouts"), "nemo_gym.rollout_collection.collect"),
    **dict.fromkeys(("E2ERolloutCollectionConfig", "RolloutAggregationConfig", "RolloutCollectionConfig",
                     "SharedRolloutCollectionConfig"), "nemo_gym.rollout_collection.config"),
    "e2e_collect_rollouts": "nemo_gym.rollout_collection.e2e",
    **dict.fromkeys(("EnvironmentMetricsSkipped", "RolloutAggregationHelper", "RolloutCollectionHelper"),
                    "nemo_gym.rollout_collection.helper"),
    **dict.fromkeys(("RolloutFailure", "RolloutPolicy"), "nemo_gym.rollout_collection.rollout"),
    "RolloutStream": "nemo_gym.rollout_collection.stream",
})
