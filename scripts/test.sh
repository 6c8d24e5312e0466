#!/usr/bin/env bash
# The project's test command: installs everything the tests need (idempotent), then runs the whole suite with the
# type check of nemo_gym/ (mypy) beside it.
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

# The weight-update tests write half-GB model copies: name the free space, so a full disk is plain in the log.
echo "[test] free disk for temporary folders (${TMPDIR:-/tmp}): $(df -Ph "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}')"
started=$(date +%s)
side_dir=$(mktemp -d)
# Each side job leads its own process group, stopped however this ends.
trap 'for job in $(jobs -p); do kill -- -"$job" 2>/dev/null || true; done; rm -rf "$side_dir"' EXIT
# The type check ([tool.mypy] in pyproject.toml), one core for about a minute, beside the tests: a type error in
# nemo_gym/ fails the run like a failing test.
setsid .venv/bin/python -m mypy >"$side_dir/mypy.log" 2>&1 &
mypy_job=$!
side_jobs=()
if [ "$#" -eq 0 ]; then
  # The whole suite, in three sessions side by side (one session took 47 minutes on 2 cores, three take 36; the
  # cores are then busy throughout, and a fourth session made it slower and some timing-bound tests fail):
  # - the Slurm tests, which mostly wait (Slurm's scheduler, answers slowed on purpose); they hold the one-node
  #   cluster alone either way (tests/slurm/conftest.py);
  # - the tests marked vllm, which share one vLLM server (conftest.py);
  # - the rest, here.
  setsid .venv/bin/python -m pytest -q -rfEs --durations=5 --basetemp="$side_dir/slurm" tests/slurm \
    >"$side_dir/slurm.log" 2>&1 &
  side_jobs+=("$!:slurm:the Slurm tests")
  setsid .venv/bin/python -m pytest -q -rfEs --durations=10 --basetemp="$side_dir/vllm" -m vllm \
    --ignore=tests/slurm >"$side_dir/vllm.log" 2>&1 &
  side_jobs+=("$!:vllm:the tests marked vllm")
  set -- -m "not vllm" --ignore=tests/slurm
fi
set +e
.venv/bin/python -m pytest -q -rfEs --durations=15 "$@"
code=$?
side_code=0
for job in "${side_jobs[@]}"; do
  pid=${job%%:*}; rest=${job#*:}; log=${rest%%:*}; label=${rest#*:}
  wait "$pid"
  status=$?
  if [ "$status" -ne 0 ]; then
    side_code=$status
  fi
  echo "[test] $label, run beside the others:"
  cat "$side_dir/$log.log"
done
wait "$mypy_job"
mypy_code=$?
set -e
echo "[test] type check: mypy nemo_gym"
cat "$side_dir/mypy.log"
echo "[test] suite wall time: $(( $(date +%s) - started )) s"
if [ "$code" -eq 5 ]; then
  echo "[test] pytest collected no tests: failing, an empty suite proves nothing" >&2
  exit 1
fi
for status in "$code" "$side_code" "$mypy_code"; do
  if [ "$status" -ne 0 ]; then
    exit "$status"
  fi
done
