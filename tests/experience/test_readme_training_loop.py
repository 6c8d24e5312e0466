"""The training loop of docs/trainers.md is scripts/async_training_loop.py, verbatim, and it runs against the real vLLM."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.stack import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "async_training_loop.py"
ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"


def test_trainers_page_shows_the_script_verbatim() -> None:
    assert f"```python\n{SCRIPT.read_text()}```" in (REPO_ROOT / "docs" / "trainers.md").read_text()


@pytest.mark.vllm
def test_the_training_loop_trains_every_prompt_once(vllm_server, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"".join(ROWS.read_bytes().splitlines(keepends=True)[:10]))  # two steps of 4; the 2 left over fill no step
    result = subprocess.run([sys.executable, str(SCRIPT), "--vllm-url", vllm_server.base_url, "--rows", str(rows)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    steps = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 2"], result.stdout
