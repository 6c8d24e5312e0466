"""The aggregate metrics file (`<stem>_aggregate_metrics.json`): a JSON list, one entry per agent, each on its own
line: `{"agent_ref": ..., "agent_metrics": ..., "key_metrics": ..., "group_level_metrics": [...]}`.

The per-task list (`group_level_metrics`) can hold a million entries, so the writer streams it, and a reader that
needs only the head of each entry (the viewer) stops reading a line where the list starts (`metrics_heads`).
"""

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import orjson

from nemo_gym.json_chunks import json_array_chunks
from nemo_gym.run_format import AGENT_REF

_GROUPS_MARK = b',"group_level_metrics":['
_ENTRY_START = b'{"' + AGENT_REF.encode() + b'":'
_READ = 1 << 16
_HEAD_LIMIT = 1 << 24  # an agent's metrics before its per-task list: far below this


class MetricsWriter:
    """Writes the entries of one metrics file, an agent at a time."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._entries = 0

    def add(self, agent: str, agent_metrics: dict, key_metrics: dict, groups: Iterable[dict[str, Any]]) -> None:
        """One agent's entry, with the per-task list written as it is produced."""
        if self._entries:
            self._out.write(b",\n")
        self._entries += 1
        head = (_ENTRY_START + orjson.dumps({"name": agent}) + b',"agent_metrics":' + orjson.dumps(agent_metrics)
                + b',"key_metrics":' + orjson.dumps(key_metrics) + _GROUPS_MARK)
        for chunk in json_array_chunks(head, groups):
            self._out.write(chunk)


@contextmanager
def writing_metrics(path: Path) -> Iterator[MetricsWriter]:
    """A writer whose file replaces `path` when the block ends without an error (never a half-written file)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(b"[\n")
            yield MetricsWriter(out)
            out.write(b"\n]\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The whole file, per-task lists included (small runs only: tests and benchmarks)."""
    return orjson.loads(path.read_bytes())


def _lines_heads(path: Path) -> Iterator[bytes]:
    """The first bytes of each line of `path` up to the per-task list, skipping the rest of the line unread into
    memory."""
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


def metrics_heads(path: Path) -> dict[str, dict[str, Any]]:
    """Agent name -> {"agent_metrics", "key_metrics"} from the metrics file at `path`; {} when there is none or it
    is not laid out as `MetricsWriter` writes it."""
    if not path.is_file():
        return {}
    heads: dict[str, dict[str, Any]] = {}
    for head in _lines_heads(path):
        if not head.startswith(_ENTRY_START):
            continue
        try:
            entry = orjson.loads(head + b"}")
        except orjson.JSONDecodeError:
            continue
        name = (entry.get(AGENT_REF) or {}).get("name")
        if isinstance(name, str):
            heads[name] = {"agent_metrics": entry.get("agent_metrics") or {},
                           "key_metrics": entry.get("key_metrics") or {}}
    return heads
