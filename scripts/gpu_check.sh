#!/usr/bin/env bash
# The checks only a GPU machine can make, in one command: the `gpu`-marked tests, the main job (scripts/main.sh, vLLM's
# CUDA build with GPU arguments) and the saturation benchmark (full stack vs a direct client of the same vLLM).
# Writes benchmarks/results/gpu_check.json: the GPU, and for each part its exit status and wall time, or why it did
# not run (no vLLM on the machine: the tests still run). Commit that file with what it measured.
#
#   bash scripts/gpu_check.sh
#
# On a machine where `nvidia-smi -L` lists no GPU it checks nothing, says so, and exits 1 (the results file is left
# as it was). Runs .venv/bin/python where scripts/setup.sh and scripts/setup_tests.sh ran (they install the CUDA vLLM on
# a GPU), else python3 (or $PYTHON): a GPU machine without the venv or vLLM runs the gpu tests alone. Only the test
# files that hold gpu tests are collected, so the rest of the suite's imports (vLLM, playwright) need not be there;
# each gpu test's outcome goes into the results file.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's nemo_gym, installed or not
RESULTS=benchmarks/results/gpu_check.json
log() { echo "[gpu-check] $*"; }

if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  log "no NVIDIA GPU on this machine (nvidia-smi -L lists none): nothing was checked and $RESULTS is unchanged;"
  log "run this script on a GPU machine. Here the gpu-marked tests are deselected by their marker."
  exit 1
fi
gpu="$(nvidia-smi -L | head -n 1)"
log "GPU: $gpu"

parts=()  # name|status|wall_s|note
run_part() {  # name, note, command...
  local name="$1" note="$2"; shift 2
  log "running $name: $*"
  local started code
  started=$(date +%s)
  "$@"
  code=$?
  parts+=("$name|$code|$(( $(date +%s) - started ))|$note")
  log "$name: exit $code"
}

JUNIT="$(mktemp -d)/gpu_tests.xml"
mapfile -t gpu_files < <(grep -rlE --include='test_*.py' 'mark\.gpu|marks=pytest\.mark\.gpu' tests nemo_gym | sort)
log "test files with gpu tests: ${gpu_files[*]}"
run_part gpu_tests "pytest -m gpu on ${#gpu_files[@]} files" "$PY" -m pytest -q -m gpu -rfEs -p no:cacheprovider \
  --junitxml="$JUNIT" "${gpu_files[@]}"
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  run_part main_job "bash scripts/main.sh +limit=50" env NEMO_GYM_SKIP_SETUP=1 bash scripts/main.sh +limit=50
  run_part saturation "benchmarks/results/saturation.json" "$PY" -m benchmarks.perf.saturation
else
  log "vLLM is not importable in .venv (scripts/setup.sh installs its CUDA build): main job and saturation not run"
  parts+=("main_job|not run|0|vLLM not installed on this machine" "saturation|not run|0|vLLM not installed on this machine")
fi

"$PY" - "$RESULTS" "$gpu" "$JUNIT" "${parts[@]}" <<'PY'
import json, os, sys, time
import xml.etree.ElementTree as ElementTree
path, gpu, junit, *parts = sys.argv[1:]
entries = {}
for part in parts:
    name, status, wall_s, note = part.split("|", 3)
    entries[name] = {"exit_status": int(status) if status.lstrip("-").isdigit() else None, "ran": status != "not run",
                     "wall_s": int(wall_s), "note": note}
tests = {}  # each gpu test's outcome, from pytest's JUnit report
if os.path.exists(junit):
    for case in ElementTree.parse(junit).iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        tests[f"{case.get('classname')}::{case.get('name')}"] = {"outcome": outcome,
                                                                 "time_s": float(case.get("time", 0))}
entries["gpu_tests"]["tests"] = tests
with open(path, "w") as out:
    json.dump({"gpu": gpu, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "parts": entries},
              out, indent=2)
    out.write("\n")
print(f"[gpu-check] wrote {path}")
PY
for part in "${parts[@]}"; do
  status="$(cut -d'|' -f2 <<<"$part")"
  [[ "$status" == 0 || "$status" == "not run" ]] || exit 1
done
