"""One collector checkpoint = one file, written atomically.

Buffer entries, the dataloader cursor and the prompts drawn but not yet trained go into a single file in a single
write: a crash leaves either the old checkpoint or the new one, never a cursor from one moment beside a buffer
from another (the reference saved them apart and a resumed run skipped prompts). The payload is `torch.save`d:
groups hold token tensors, which torch stores as raw storages instead of pickling them element by element, and
it is the format the trainer's own checkpoints use. Loading unpickles, so load only checkpoints you wrote.
"""

import os
from pathlib import Path
from typing import Any

import torch

from nemo_gym.experience.errors import CollectorCheckpointError

CHECKPOINT_FORMAT = "nemo_gym.async_trajectory_collector/1"


def write_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Write `payload` to `path` via a temporary file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        # The rename itself must reach the disk, or a power loss can bring back the old name.
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise CollectorCheckpointError(f"could not write collector checkpoint {path}: {exc}") from exc


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CollectorCheckpointError(f"could not read collector checkpoint {path}: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CollectorCheckpointError(f"{path} is not a {CHECKPOINT_FORMAT} checkpoint (found {found!r})")
    return payload
