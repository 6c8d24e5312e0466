"""The weights folder a trainer hands to the generation backends: one format, its writer, its checker, its reader.

The format is what `save_pretrained` writes: `*.safetensors` files (and `model.safetensors.index.json` when
sharded), next to config.json. vLLM reads the folder while it serves, and in vLLM 0.32 any exception inside
`reload_weights` (a missing folder, a truncated file) kills its engine. So the writer publishes a folder only once
it is complete (written under a temporary name, then renamed), and every backend checks a folder before it touches
a single replica.
"""

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

INDEX_FILE = "model.safetensors.index.json"
# Bytes per element of each safetensors dtype.
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def write_weights(model: Any, weights_dir: str | os.PathLike[str]) -> Path:
    """Write `model`'s weights (a transformers model: `save_pretrained`) into the fresh folder `weights_dir`.

    The folder appears complete or not at all: it is written under a temporary name beside it and renamed into
    place. An existing `weights_dir` is refused, since a backend may be reading it; write each version to its
    own folder.
    """
    target = Path(weights_dir)
    if target.exists():
        raise FileExistsError(f"{target} exists: write each weight version into a fresh folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        model.save_pretrained(partial)
        check_weights_dir(partial)
        os.rename(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


def check_weights_dir(weights_dir: str | os.PathLike[str]) -> list[Path]:
    """The safetensors files of a complete weights folder; ValueError naming what is wrong otherwise.

    Reads only the headers: each file must parse, hold at least one tensor, and be exactly as long as its header
    says (a truncated or padded file fails), and a sharded folder must have every shard its index names.
    """
    folder = Path(weights_dir)
    if not folder.is_dir():
        raise ValueError(f"weights folder {folder} does not exist")
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{index} is not a safetensors index: {type(exc).__name__}: {exc}") from None
        files = [folder / name for name in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"{folder}: shards named by {INDEX_FILE} are missing: {missing}")
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"weights folder {folder} has no *.safetensors file")
    seen: set[str] = set()
    for file in files:
        for name in _tensor_names(file):
            if name in seen:
                raise ValueError(f"{folder}: tensor {name} is in more than one file")
            seen.add(name)
    return files


def read_weights(weights_dir: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Every tensor of a weights folder (checked first), on the CPU."""
    tensors: dict[str, torch.Tensor] = {}
    for file in check_weights_dir(weights_dir):
        tensors.update(load_file(file))
    return tensors


def _tensor_names(file: Path) -> list[str]:
    size = file.stat().st_size
    with open(file, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{file}: {size} bytes, too short for a safetensors file")
        header_bytes = struct.unpack("<Q", prefix)[0]
        if header_bytes > min(_MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{file}: header of {header_bytes} bytes in a file of {size} (truncated or corrupt)")
        try:
            header = json.loads(handle.read(header_bytes))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{file}: unreadable safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{file}: the safetensors header is not an object")
    header.pop("__metadata__", None)
    if not header:
        raise ValueError(f"{file} holds no tensor")
    data_end = 0
    for name, entry in header.items():
        try:
            shape, (begin, end), width = entry["shape"], entry["data_offsets"], _DTYPE_BYTES[entry["dtype"]]
            elements = 1
            for dim in shape:
                elements *= int(dim)
            valid = 0 <= begin <= end and end - begin == elements * width
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{file}: malformed entry for tensor {name}: {type(exc).__name__}: {exc}") from None
        if not valid:
            raise ValueError(f"{file}: tensor {name} has offsets {entry['data_offsets']} that do not fit "
                             f"{entry['dtype']}{shape}")
        data_end = max(data_end, end)
    if 8 + header_bytes + data_end != size:
        raise ValueError(f"{file}: {size} bytes, but its header describes {8 + header_bytes + data_end} "
                         f"(truncated or corrupt)")
    return list(header)


def copy_weights_into(module: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Copy `tensors` (a weights folder's, by state-dict name) into `module`'s parameters and buffers in place.

    Everything is matched first, so on ValueError nothing has changed: a name the module does not have, a shape that
    differs, or a weight left out. A weight tied to one that is present (a language model's head sharing the
    embedding, which save_pretrained writes once) counts as present.
    """
    state = module.state_dict(keep_vars=True)
    unknown = sorted(set(tensors) - set(state))
    if unknown:
        raise ValueError(f"{len(unknown)} tensor(s) the model does not have, e.g. {unknown[:3]}")
    reshaped = [f"{name} {tuple(t.shape)} != {tuple(state[name].shape)}" for name, t in tensors.items()
                if t.shape != state[name].shape]
    if reshaped:
        raise ValueError(f"{len(reshaped)} tensor(s) of another shape than the model's, e.g. {reshaped[:3]}")
    present = {state[name].data_ptr() for name in tensors}
    missing = sorted(name for name, t in state.items() if name not in tensors and t.data_ptr() not in present)
    if missing:
        raise ValueError(f"{len(missing)} weight(s) of the model are not in the folder, e.g. {missing[:3]}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            state[name].copy_(tensor)
