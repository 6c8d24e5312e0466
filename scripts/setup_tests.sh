#!/usr/bin/env bash
# What only the tests need, on top of scripts/setup.sh (which scripts/test.sh runs first): the dev extra (pytest,
# playwright, and every optional part the tests exercise), NeMo Gym 0.4.0 as the side-by-side reference, and, as
# root, Slurm and chromium from apt. Idempotent; from scratch on a fresh clone.
#   --beside-setup   only the parts that need no .venv (the reference and apt), which scripts/test.sh runs beside
#                    scripts/setup.sh: both are mostly one-core pip work, and the machine has more cores
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
PY="$REPO_ROOT/.venv/bin/python"

log() { echo "[setup-tests +${SECONDS}s] $*"; }
die() { echo "[setup-tests] error: $*" >&2; exit 1; }
pip_install() { "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }; }

BESIDE_SETUP=0
case "${1:-}" in
  "") ;;
  --beside-setup) BESIDE_SETUP=1 ;;
  *) die "unknown argument $1 (the only one is --beside-setup)" ;;
esac

if (( ! BESIDE_SETUP )); then
  [[ -x "$PY" ]] || die ".venv is missing: run scripts/setup.sh first"
  # Pin the installed torch so the extras never swap it for another build.
  CONSTRAINTS="$(mktemp)"
  trap 'rm -f "$CONSTRAINTS"' EXIT
  "$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" >"$CONSTRAINTS"
  log "installing nemo_gym[dev] (editable)"
  pip_install -c "$CONSTRAINTS" -e "$REPO_ROOT[dev]"
  # IFEval's reference checkers: only lm-eval's ifeval modules are used (benchmarks/ifeval/reference.py), which need
  # nothing of the harness's own dependencies (datasets, evaluate, ...): the dev extra has the three they import.
  log "installing lm-eval's IFEval checkers (lm-eval, without its dependencies)"
  pip_install --no-deps "lm-eval==0.4.13"
fi

# NeMo Gym 0.4.0, the reference the compatibility tests run side by side with ours. It needs Python >= 3.12 and
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

# System packages the tests need, installed only when running as root and missing: Slurm for tests/slurm
#    (scripts/slurm_cluster.sh starts a one-node cluster from them) and chromium, which renders the HTML report
#    and which tests/viewer/test_browser.py drives with playwright; ss (iproute2), with which the in-flight
#    weight-update test sees a message waiting at vLLM's frozen engine.
#    A failed install does not fail setup; the tests that need them report it.
APT_PACKAGES=()
command -v sbatch >/dev/null 2>&1 || APT_PACKAGES+=(slurm-wlm munge)
command -v ss >/dev/null 2>&1 || APT_PACKAGES+=(iproute2)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || APT_PACKAGES+=(chromium)
if [[ "$(id -u)" == 0 ]] && (( ${#APT_PACKAGES[@]} )) && command -v apt-get >/dev/null 2>&1; then
  log "installing ${APT_PACKAGES[*]} (apt)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PACKAGES[@]}" >/dev/null; }; then
    log "warning: could not install ${APT_PACKAGES[*]}; the tests that need them will fail"
  fi
fi

log "done"
