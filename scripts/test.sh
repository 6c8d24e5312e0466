#!/usr/bin/env bash
# The project's test command: installs everything the tests need (idempotent), type-checks nemo_gym/ (mypy), then
# runs the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not vllm"` or `bash scripts/test.sh tests/unit`.
# Skips are listed with their reasons (-rs); NEMO_GYM_REQUIRE_ALL=1 (set by .ci/run) turns every skip into a failure.
# Tests marked gpu are deselected where there is no CUDA device, and the summary lists them.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests' parts that need no .venv (NeMo Gym's reference, apt packages) install beside setup.sh's vLLM: both are
# mostly one-core pip work. The side job leads its own process group, so that it is stopped however this ends.
setsid bash scripts/setup_tests.sh --beside-setup &
beside=$!
trap 'kill -- -"$beside" 2>/dev/null || true' EXIT
bash scripts/setup.sh        # what the main job needs
wait "$beside"
trap - EXIT
bash scripts/setup_tests.sh  # what only the tests need (the rest of it)

# The type check ([tool.mypy] in pyproject.toml): a type error in nemo_gym/ fails the run like a failing test.
echo "[test] type check: mypy nemo_gym"
.venv/bin/python -m mypy

# The weight-update tests write half-GB model copies: name the free space, so a full disk is plain in the log.
echo "[test] free disk for temporary folders (${TMPDIR:-/tmp}): $(df -Ph "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}')"
started=$(date +%s)
set +e
.venv/bin/python -m pytest -q -rfEs --durations=15 "$@"
code=$?
set -e
echo "[test] suite wall time: $(( $(date +%s) - started )) s"
if [ "$code" -eq 5 ]; then
  echo "[test] pytest collected no tests: failing, an empty suite proves nothing" >&2
  exit 1
fi
exit "$code"
