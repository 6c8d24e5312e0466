#!/usr/bin/env bash
# Idempotent: .venv-trl, the benchmark-only virtualenv in which benchmarks/perf/grpo_vs_trl.py runs TRL's
# GRPOTrainer. TRL never goes into .venv (the product's environment). Needs .venv (scripts/setup.sh) first: the
# packages both sides share (torch, transformers, accelerate, and the math verifier's math-verify, sympy and
# antlr4 runtime) are pinned to .venv's versions, so the two trainers differ only in the trainer. requests too:
# trl 1.13's GRPO trainer imports it without declaring it.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAIN_PY="$REPO_ROOT/.venv/bin/python"
VENV="$REPO_ROOT/.venv-trl"
PY="$VENV/bin/python"
TRL_PACKAGE="trl==1.13.0"
SHARED=(torch transformers accelerate math-verify latex2sympy2_extended antlr4-python3-runtime sympy requests)

log() { echo "[setup_trl +${SECONDS}s] $*"; }
[[ -x "$MAIN_PY" ]] || { echo "[setup_trl] error: $MAIN_PY missing: run scripts/setup.sh first" >&2; exit 1; }

if [[ ! -x "$PY" ]]; then
  BASE_PY="$("$MAIN_PY" -c 'import sys; print(sys._base_executable)')"
  log "creating .venv-trl with $BASE_PY"
  "$BASE_PY" -m venv "$VENV"
fi

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
"$MAIN_PY" - "${SHARED[@]}" >"$CONSTRAINTS" <<'EOF'
import importlib.metadata as metadata
import sys

for name in sys.argv[1:]:
    print(f"{name}=={metadata.version(name)}")
EOF

if "$PY" - "$TRL_PACKAGE" "$CONSTRAINTS" <<'EOF'
import importlib.metadata as metadata
import sys

def installed(spec: str) -> bool:
    name, version = spec.split("==")
    try:
        return metadata.version(name) == version
    except metadata.PackageNotFoundError:
        return False


sys.exit(0 if all(map(installed, [sys.argv[1], *open(sys.argv[2]).read().split()])) else 1)
EOF
then
  log "$TRL_PACKAGE and the shared pins already installed"
else
  log "installing $TRL_PACKAGE with $(tr '\n' ' ' <"$CONSTRAINTS")"
  # (minus the noise of unreachable index locations some machines have configured)
  "$PY" -m pip install --quiet -c "$CONSTRAINTS" "$TRL_PACKAGE" "${SHARED[@]}" 2>&1 \
    | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
fi
log "done: $("$PY" -c 'import trl, torch, transformers as t; print("trl", trl.__version__, "torch", torch.__version__,
                                                                  "transformers", t.__version__)')"
