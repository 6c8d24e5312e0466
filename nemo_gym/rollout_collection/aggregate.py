"""Metrics over finished rollouts, computed by each agent's `/aggregate_metrics`, and merging of shard files.

Both directions stream: rows go to the agent as a chunked request body read straight from the JSONL files, and
the agent's answer goes straight into `<stem>_aggregate_metrics.json`. The collector never holds the rows or the
per-task metrics in memory, so aggregation costs the same few megabytes at 10k rows as at 1M.
ng_collect_rollouts and ng_aggregate_rollouts both end here.
"""

import asyncio
import glob
import json
import mmap
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, BinaryIO, Sequence

import httpx
import orjson

from nemo_gym.errors import InputDataError, NemoGymError
from nemo_gym.http_client import RetryPolicy
from nemo_gym.rollout_collection.keys import AGENT_REF, row_key
from nemo_gym.rollout_collection.store import iter_lines
from nemo_gym.server.client import ServerClient

AGGREGATE_TIMEOUT_S = 1800.0
_CHUNK_BYTES = 1 << 18
_RETRY = RetryPolicy(max_attempts=3, backoff_base_s=1.0)
_SUMMARY_KEYS = ("agent_metrics", "key_metrics")
_SUMMARY_WINDOW = 1 << 20  # the printed summaries are small; the per-task list after them is never loaded


def _expand_input_glob(input_glob: str) -> list[str]:
    """Expand a glob, or comma-separated globs, into a sorted, deduplicated list of existing file paths.

    'results/rollouts.jsonl' -> ['results/rollouts.jsonl'];  'a/*.jsonl, b/*.jsonl' -> matches of both.
    """
    paths = set()
    for pattern in (p.strip() for p in input_glob.split(",")):
        if pattern:
            paths.update(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    return sorted(paths)


def _agent_of(path: Path, line_no: int, line: bytes) -> str:
    try:
        ref = orjson.loads(line).get(AGENT_REF)
    except (orjson.JSONDecodeError, AttributeError):
        raise InputDataError(f"{path}:{line_no}: not a JSON object") from None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        raise InputDataError(f"{path}:{line_no}: rollout row has no agent_ref.name")
    return ref["name"]


def count_rows_by_agent(files: Sequence[Path]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in files:
        for line_no, line in iter_lines(path):
            agent = _agent_of(path, line_no, line)
            counts[agent] = counts.get(agent, 0) + 1
    return counts


async def _rows_body(files: Sequence[Path], agent: str | None) -> AsyncIterator[bytes]:
    """`{"rows": [...]}` for one agent (None: every row), in chunks; the lines are sent as they are on disk."""
    chunk = bytearray(b'{"rows":[')
    first = True
    for path in files:
        for line_no, line in iter_lines(path):
            if agent is not None and _agent_of(path, line_no, line) != agent:
                continue
            if not first:
                chunk += b","
            chunk += line.rstrip()
            first = False
            if len(chunk) >= _CHUNK_BYTES:
                yield bytes(chunk)
                chunk.clear()
    chunk += b"]}"
    yield bytes(chunk)


async def _post_streaming(client: httpx.AsyncClient, url: str, files: Sequence[Path], agent: str,
                          only_agent: bool, sink: Path) -> None:
    """POST the agent's rows and stream its JSON answer into `sink`; retries connection failures and 5xx."""
    attempt = 0
    while True:
        attempt += 1
        try:
            body = _rows_body(files, None if only_agent else agent)
            headers = {"content-type": "application/json"}
            async with client.stream("POST", url, content=body, headers=headers) as response:
                if response.status_code >= 400:
                    text = (await response.aread())[:500].decode(errors="replace")
                    error = NemoGymError(f"{url} answered HTTP {response.status_code}: {text}")
                    if response.status_code < 500 or attempt >= _RETRY.max_attempts:
                        raise error
                else:
                    with open(sink, "wb") as out:
                        async for part in response.aiter_bytes():
                            out.write(part)
                    return
        except httpx.TransportError as exc:
            if attempt >= _RETRY.max_attempts:
                raise NemoGymError(f"cannot aggregate metrics at {url}: {type(exc).__name__}: {exc}") from None
        await asyncio.sleep(_RETRY.delay(attempt))


def _splice_entry(out: BinaryIO, agent: str, answer: Path, url: str) -> None:
    """Write `{"agent_ref": ..., <the agent's answer fields>}` without parsing the (possibly huge) answer."""
    with open(answer, "rb") as src:
        head = src.read(_CHUNK_BYTES).lstrip()
        if not head.startswith(b"{"):
            raise NemoGymError(f"{url} did not answer with a JSON object: {head[:200]!r}")
        rest = head[1:].lstrip()
        out.write(b'{"agent_ref":' + orjson.dumps({"name": agent}))
        if not rest.startswith(b"}"):
            out.write(b",")
        out.write(rest)
        while part := src.read(_CHUNK_BYTES):
            out.write(part)


def _summary(agent: str, answer: Path) -> dict[str, Any]:
    """`agent_ref` plus the agent's `agent_metrics` and `key_metrics`, read without loading the per-task metrics."""
    summary: dict[str, Any] = {AGENT_REF: {"name": agent}}
    decoder = json.JSONDecoder()
    with open(answer, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for key in _SUMMARY_KEYS:
            found = re.compile(rb'"' + key.encode() + rb'"\s*:\s*').search(data)
            if found is None:
                continue
            window = data[found.end():found.end() + _SUMMARY_WINDOW].decode(errors="replace")
            try:
                summary[key] = decoder.raw_decode(window)[0]
            except ValueError:
                continue
    return summary


@dataclass
class AggregateResult:
    path: Path
    summaries: list[dict[str, Any]]  # per agent: agent_ref, agent_metrics, key_metrics (no per-task metrics)


async def aggregate_rollouts(files: Sequence[Path], metrics_path: Path, servers: ServerClient,
                             http_timeout_s: float = AGGREGATE_TIMEOUT_S) -> AggregateResult:
    """POST each agent's rows to its `/aggregate_metrics` and write one entry per agent to `metrics_path`."""
    counts = count_rows_by_agent(files)
    if not counts:
        raise NemoGymError(f"no rollouts to aggregate in {', '.join(map(str, files))}")
    urls = {agent: await servers.url(agent) for agent in sorted(counts)}
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = metrics_path.with_name(metrics_path.name + ".tmp")
    answer = metrics_path.with_name(metrics_path.name + ".answer.tmp")
    timeout = httpx.Timeout(http_timeout_s, connect=5.0)
    summaries = []
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            with open(tmp, "wb") as out:
                out.write(b"[\n")
                for i, agent in enumerate(sorted(counts)):
                    url = f"{urls[agent]}/aggregate_metrics"
                    print(f"aggregating {counts[agent]} rollouts of '{agent}' ...", file=sys.stderr, flush=True)
                    await _post_streaming(client, url, files, agent, len(counts) == 1, answer)
                    if i:
                        out.write(b",\n")
                    _splice_entry(out, agent, answer, url)
                    summaries.append(_summary(agent, answer))
                out.write(b"\n]\n")
        os.replace(tmp, metrics_path)
    finally:
        tmp.unlink(missing_ok=True)
        answer.unlink(missing_ok=True)
    return AggregateResult(metrics_path, summaries)


@dataclass
class MergeStats:
    rows: int = 0
    duplicates: int = 0


def merge_shards(files: Sequence[Path], dest: Path) -> MergeStats:
    """Write every rollout of `files` to `dest` once, ordered by key; a key seen again is dropped and counted.

    Holds one small index entry per row (key, file, offset), not the rows.
    """
    index: list[tuple[int, int, int, int]] = []
    for file_no, path in enumerate(files):
        offset = 0
        with open(path, "rb") as file:
            for line_no, line in enumerate(file, start=1):
                if line.strip():
                    key = row_key(line)
                    if key is None:
                        raise InputDataError(
                            f"{path}:{line_no}: not a rollout row (no _ng_task_index/_ng_rollout_index)"
                        )
                    index.append((key[0], key[1], file_no, offset))
                offset += len(line)
    index.sort()
    stats = MergeStats()
    tmp = dest.with_name(dest.name + ".tmp")
    handles = [open(path, "rb") for path in files]
    try:
        with open(tmp, "wb") as out:
            previous = None
            for task, rollout, file_no, offset in index:
                if (task, rollout) == previous:
                    stats.duplicates += 1
                    continue
                previous = (task, rollout)
                handles[file_no].seek(offset)
                line = handles[file_no].readline()
                out.write(line if line.endswith(b"\n") else line + b"\n")
                stats.rows += 1
        os.replace(tmp, dest)
    finally:
        for handle in handles:
            handle.close()
        tmp.unlink(missing_ok=True)
    return stats
