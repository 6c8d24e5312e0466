#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: installs only what it needs (scripts/setup.sh, idempotent;
# what only the tests need is scripts/setup_tests.sh's), then ng_e2e_collect_rollouts starts vLLM with the bundled
# SmolLM2-135M-Instruct and the math servers, collects rollouts of the example arithmetic dataset into results/,
# aggregates their metrics and stops everything.
# Extra arguments are overrides for ng_e2e_collect_rollouts, e.g. `bash scripts/main.sh +limit=10`.
# NEMO_GYM_SKIP_SETUP=1 skips the install step (a checkout that shares another checkout's installed venv).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${NEMO_GYM_SKIP_SETUP:-0}" != "1" ]]; then
  bash scripts/setup.sh
fi

# A new file per run: the collector never overwrites an existing output.
output="results/math_rollouts_$(date -u +%Y%m%dT%H%M%SZ).jsonl"
exec .venv/bin/ng_e2e_collect_rollouts "+config_paths=[nemo_gym/resources_servers/math/configs/math.yaml,configs/local_vllm_model.yaml]" \
    +split=example "+output_jsonl_fpath=$output" "$@"
