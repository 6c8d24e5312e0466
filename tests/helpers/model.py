"""The bundled test model and the vLLM server the `vllm_server` fixture (conftest.py) hands to tests."""

import os
from pathlib import Path

from tests.helpers.stack import REPO_ROOT

MODEL_DIR = Path(os.environ.get("NEMO_GYM_TEST_MODEL", REPO_ROOT / "models" / "SmolLM2-135M-Instruct"))
MODEL_NAME = "SmolLM2-135M-Instruct"


class VLLMServer:
    def __init__(self, base_url: str, model: str, cold_start_s: float) -> None:
        self.base_url = base_url
        self.model = model
        self.cold_start_s = cold_start_s
