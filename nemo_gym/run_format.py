"""The on-disk format of a collection run: every field name, file suffix and file name its readers and writers share.

A run's files are read by other programs (ng_aggregate_rollouts, the Slurm jobs and summary, NeMo Gym's tools), so
each name is defined once, here, and nowhere else.

    <stem>.jsonl                        rollouts: the agent's reply + TASK_INDEX, ROLLOUT_INDEX (first), AGENT_REF
    <stem>_failures.jsonl               a record each time a rollout fails a run: keys, AGENT_REF, failure fields
    <stem>_materialized_inputs.jsonl    the expanded input rows of this run (keys first)
    <stem>_manifest.json                the run's fingerprint and counts (resume compares the fingerprint)
    <stem>_aggregate_metrics.json       one entry per agent: agent_ref, agent_metrics, key_metrics, group_level_metrics
    <stem>_report.html                  the human-readable report of those metrics
    <stem>_progress.json                the collector's progress while it runs, replaced atomically every few seconds
    <stem>_<split>_inputs.jsonl         ng_e2e_collect_rollouts: the prepared inputs of a dataset split

A Slurm run directory holds shard outputs named by `shard_file_name`, completion markers named by
`done_marker_name`, and the merged output `MERGED_ROLLOUTS` with its sidecars (nemo_gym.slurm.layout places them).

The names only: nemo_gym.run_files builds the paths from them and reads and writes the files.
"""

# Row fields. The two keys identify a rollout; our writers put them first in every line.
TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
# A row's own repeat count, over +num_repeats: ng_e2e_collect_rollouts writes it from a dataset's `num_repeats`.
NUM_REPEATS = "_ng_num_repeats"
INTERNAL_PREFIX = "_ng_"  # bookkeeping fields: never a metric
AGENT_REF = "agent_ref"
CREATE_PARAMS = "responses_create_params"
# The rollout's model calls, one record each (nemo_gym.model_calls.ModelCall), added by the agent.
MODEL_CALLS = "_ng_model_calls"

# Failure records (`<stem>_failures.jsonl`), besides the keys and AGENT_REF.
FAILURE_CLASS = "failure_class"
ATTEMPTS = "attempts"
LAST_ERROR = "last_error"
HTTP_STATUS = "http_status"
# The agent's whole reply, in the record of a rollout that failed in its verification (a reply marked failed that
# holds the `response`): ng_reverify_rollouts verifies it again without the model.
FAILED_ROLLOUT = "rollout"
UNKNOWN_FAILURE_CLASS = "unknown"  # a record without a class (written by something else)

# Manifest fields read outside the collector.
MANIFEST_FINGERPRINT = "fingerprint"
MANIFEST_SHARD_ROLLOUTS = "shard_rollouts"

# Sidecars: `<stem><suffix>` next to the rollouts file.
FAILURES_SUFFIX = "_failures.jsonl"
MATERIALIZED_INPUTS_SUFFIX = "_materialized_inputs.jsonl"
MANIFEST_SUFFIX = "_manifest.json"
AGGREGATE_METRICS_SUFFIX = "_aggregate_metrics.json"
REPORT_SUFFIX = "_report.html"
COLLECT_LOG_SUFFIX = "_collect.log"  # the collector's own log
PROGRESS_SUFFIX = "_progress.json"  # the collector's progress file (nemo_gym.rollout_collection.progress_file)
PREPARED_INPUTS_SUFFIX = "_inputs.jsonl"  # `_<split>_inputs.jsonl`
REPLAY_SUFFIX = "_replay.jsonl"  # the finished model calls of rollouts not yet in the output (model_call_replay.py)
# Sidecars that match a `*.jsonl` glob but never hold rollouts.
JSONL_SIDECAR_SUFFIXES = (FAILURES_SUFFIX, MATERIALIZED_INPUTS_SUFFIX, PREPARED_INPUTS_SUFFIX, REPLAY_SUFFIX)

# Slurm runs.
MERGED_ROLLOUTS = "rollouts.jsonl"
SUMMARY = "summary.json"
SUBMISSION = "submission.json"


def prepared_inputs_suffix(split: str) -> str:
    return f"_{split}{PREPARED_INPUTS_SUFFIX}"


def shard_file_name(shard: int | str, num_shards: int | str) -> str:
    """The rollouts file of one shard; `shard` may be a shell variable or a glob when rendered into a job script."""
    return f"rollouts-shard{shard}-of{num_shards}.jsonl"


def done_marker_name(shard: int | str) -> str:
    """The file a shard's job writes once its collector finished cleanly."""
    return f"shard{shard}.done"
