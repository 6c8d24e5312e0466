"""The one owner of a run's files, reading and writing (their names are nemo_gym.run_format's).

    paths        where the files of a run are: `RunPaths(rollouts)` gives each sidecar; globs of rollout files
    rows         lines of a JSONL file (read, or written to replace it) and the rollout key of a line
    failures     failure records and the rule that reads them: the latest record of a key wins
    manifest     the run's manifest, read and written whole
    metrics_file the aggregate metrics file: written an agent at a time, read whole or by its heads
    key_order    rollout files read in key order, each key once (aggregation, merging, the viewer's index)

Every program that reads or writes these files (the collector, ng_aggregate_rollouts, the Slurm summary, the
viewer, the benchmarks) goes through these modules, so the layout and the rules are written once.
"""
