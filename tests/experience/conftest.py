"""Fixtures of the trainer-facing tests."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    """A folder with a one-tensor safetensors checkpoint, for weight updates from disk."""
    folder = tmp_path / "v1"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    return folder
