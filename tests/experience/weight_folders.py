"""Weights folders of the bundled model for the weight-update tests, written the way a trainer writes them."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from nemo_gym.experience.generation.weights import write_weights
from tests.helpers.model import MODEL_DIR


@contextmanager
def removed_after(root: Path) -> Iterator[Path]:
    """`root`, removed when the block ends: each weights folder is half a GB, and a module's temporary folders
    otherwise stay on disk until the whole session ends."""
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_weight_folders(root: Path) -> dict[str, Path]:
    """Three folders under `root`, by name:
    "original": the bundled weights in float32 (what vLLM and HFGeneration serve at start);
    "layers": the MLPs of the first two layers scaled by 1.5: output, log-probs, keys and values all change;
    "final_norm": noise on the final norm only, which no key or value depends on: a request in flight when it is
    loaded goes on with valid keys and values, so its later tokens are exactly what the new weights choose.
    """
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    folders = {"original": write_weights(model, root / "original")}
    with torch.no_grad():
        norm = model.model.norm.weight
        saved = norm.clone()
        norm.add_(0.5 * torch.randn(norm.shape, generator=torch.Generator().manual_seed(0)))
        folders["final_norm"] = write_weights(model, root / "final_norm")
        norm.copy_(saved)
        for name, parameter in model.named_parameters():
            if name.startswith(("model.layers.0.mlp.", "model.layers.1.mlp.")):
                parameter.mul_(1.5)
        folders["layers"] = write_weights(model, root / "layers")
    return folders
