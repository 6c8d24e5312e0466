"""The files a run writes next to its rollouts, as the viewer reads them: failures, manifest, aggregate metrics.

`<stem>_failures.jsonl` holds one record per failed attempt series (the last record of a key wins);
`<stem>_manifest.json` the run's fingerprint; `<stem>_aggregate_metrics.json` the metrics of the aggregation,
whose per-task list can hold a million entries, so only the head of each agent's entry is read (see
`metrics_heads`).
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import orjson

from nemo_gym.rollout_collection.config import aggregate_metrics_path
from nemo_gym.rollout_collection.keys import row_key
from nemo_gym.rollout_collection.shards import failures_sidecar
from nemo_gym.run_format import (
    AGENT_REF,
    FAILURE_CLASS,
    JSONL_SIDECAR_SUFFIXES,
    MANIFEST_SUFFIX,
    UNKNOWN_FAILURE_CLASS,
    sidecar,
)

_GROUPS_MARK = b',"group_level_metrics":['
_READ = 1 << 16
_HEAD_LIMIT = 1 << 24  # an agent's metrics before its per-task list: far below this


@dataclass(frozen=True)
class FailureRecord:
    task: int
    rollout: int
    file: Path  # the failures sidecar
    offset: int
    length: int
    agent: str
    failure_class: str


def is_rollout_file(path: Path) -> bool:
    return not path.name.endswith(JSONL_SIDECAR_SUFFIXES)


def failure_records(rollout_files: list[Path]) -> dict[tuple[int, int], FailureRecord]:
    """Key -> location of its latest failure record, over the sidecars of `rollout_files`; torn lines are skipped."""
    latest: dict[tuple[int, int], FailureRecord] = {}
    for rollouts in rollout_files:
        path = failures_sidecar(rollouts)
        if not path.is_file():
            continue
        offset = 0
        with open(path, "rb") as file:
            for line in file:
                key = row_key(line)
                if key is not None:
                    record = orjson.loads(line)
                    agent = (record.get(AGENT_REF) or {}).get("name", "")
                    latest[key] = FailureRecord(key[0], key[1], path, offset, len(line), str(agent),
                                                str(record.get(FAILURE_CLASS, UNKNOWN_FAILURE_CLASS)))
                offset += len(line)
    return latest


def manifest_path(rollouts: Path) -> Path:
    return sidecar(rollouts, MANIFEST_SUFFIX)


def read_manifest(rollouts: Path) -> dict[str, Any] | None:
    """The run's manifest, or None when there is none or it is unreadable (the viewer shows what it can)."""
    path = manifest_path(rollouts)
    try:
        manifest = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _lines_heads(path: Path) -> Iterator[bytes]:
    """The first bytes of each line of `path` up to the per-task list, skipping the rest of the line unread into
    memory: the aggregation writes one agent entry per line."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = bytearray()
        skipping = False
        while chunk := os.read(fd, _READ):
            start = 0
            while start < len(chunk):
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline < 0 else newline
                if not skipping:
                    head += chunk[start:end]
                    mark = head.find(_GROUPS_MARK)
                    if mark >= 0:
                        del head[mark:]
                        skipping = True
                    elif len(head) > _HEAD_LIMIT:
                        return
                if newline < 0:
                    break
                yield bytes(head)
                head.clear()
                skipping = False
                start = newline + 1
        if head:
            yield bytes(head)
    finally:
        os.close(fd)


def metrics_heads(rollouts: Path) -> dict[str, dict[str, Any]]:
    """Agent name -> {"agent_metrics", "key_metrics"} from the run's aggregate metrics file; {} when it has none or
    it is not laid out as the aggregation writes it."""
    path = aggregate_metrics_path(str(rollouts))
    if not path.is_file():
        return {}
    heads: dict[str, dict[str, Any]] = {}
    for head in _lines_heads(path):
        if not head.startswith(b'{"agent_ref":'):
            continue
        try:
            entry = orjson.loads(head + b"}")
        except orjson.JSONDecodeError:
            continue
        name = (entry.get("agent_ref") or {}).get("name")
        if isinstance(name, str):
            heads[name] = {"agent_metrics": entry.get("agent_metrics") or {},
                           "key_metrics": entry.get("key_metrics") or {}}
    return heads
