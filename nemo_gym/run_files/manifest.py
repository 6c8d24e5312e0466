"""The run's manifest (`<stem>_manifest.json`): one JSON object, replaced whole, never half-written.

What it holds is the collector's (nemo_gym.rollout_collection.manifest); the fields read outside the collector are
named in nemo_gym.run_format.
"""

import os
from pathlib import Path
from typing import Any

import orjson

from nemo_gym.errors import NemoGymError


class ManifestError(NemoGymError):
    """A manifest that is not a JSON object."""


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest at `path`, or None when there is none."""
    if not path.is_file():
        return None
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); delete it to start over") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path} is not a JSON object; delete it to start over")
    return manifest


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Atomically replace the manifest, so a crash never leaves half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
