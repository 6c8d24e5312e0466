#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: installs what it needs (scripts/setup.sh, idempotent),
# then ng_e2e_collect_rollouts starts vLLM with the bundled SmolLM2-135M-Instruct and the math servers, collects
# rollouts of the example arithmetic dataset into results/, aggregates their metrics and stops everything.
# Extra arguments are overrides for ng_e2e_collect_rollouts, e.g. `bash scripts/main.sh +limit=10`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

# A new file per run: the collector never overwrites an existing output.
output="results/math_rollouts_$(date -u +%Y%m%dT%H%M%SZ).jsonl"
exec .venv/bin/ng_e2e_collect_rollouts "+config_paths=[configs/math.yaml,configs/local_vllm_model.yaml]" \
    +split=example "+output_jsonl_fpath=$output" "$@"
