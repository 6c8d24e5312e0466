"""Replay of finished model calls after a crash: the tag a rollout's model calls carry, and the journal they go to.

While a run goes, the collector tags each rollout it sends with its key, the run's id and the journal's path
(`<stem>_replay.jsonl`, beside the output), under `responses_create_params.metadata[TAG_FIELD]`. Every agent that
passes the row's create params on to its model server (ours do, and NeMo Gym's) so carries the tag to our model
server, which takes it out before anything reaches the endpoint (nemo_gym.responses_api_models.replay). There each
answered call is appended to the journal, flushed, as one line: the rollout's key, the run's id, a digest of the
request, and the reply. A later run of the same output answers a call whose key and request digest match one an
earlier run recorded from the record (never one of its own: a retry within a run asks the model again): a rollout stopped mid-way is run again by its agent as usual, its finished calls cost nothing, and the first
call that differs (the request digest covers the whole conversation so far) and every one after it go to the model.

The collector compacts the journal when a run starts and when it ends, as it does the failures file: records of
rollouts in the output are dropped, and an empty journal is removed.
"""

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from nemo_gym.run_files.rows import keyed, row_key
from nemo_gym.run_format import REPLAY_SUFFIX, ROLLOUT_INDEX, TASK_INDEX

TAG_FIELD = "_ng_replay"  # in the create params' `metadata`: a string, as the OpenAI API wants metadata values
_SEPARATOR = "|"


@dataclass(frozen=True)
class ReplayTag:
    """What a rollout's model calls carry: whose they are, for which run, and where their journal is."""

    key: tuple[int, int]  # (task index, rollout index)
    run_id: str  # a new id per collector run: a model server reloads the journal when it changes
    journal: str  # the journal's path, as the model server opens it

    def encode(self) -> str:
        return _SEPARATOR.join((f"{self.key[0]}.{self.key[1]}", self.run_id, self.journal))

    @classmethod
    def decode(cls, text: Any) -> "ReplayTag | None":
        """The tag `text` holds; None for anything else (a model server answers such a call as if untagged). The
        journal must be an absolute path to a `*_replay.jsonl`: whoever can reach a model server cannot make it
        write, or read back, any other file."""
        if not isinstance(text, str):
            return None
        parts = text.split(_SEPARATOR, 2)
        if len(parts) != 3 or not parts[1] or not os.path.isabs(parts[2]) or not parts[2].endswith(REPLAY_SUFFIX):
            return None
        task, _, rollout = parts[0].partition(".")
        if not (task.isdigit() and rollout.isdigit()):
            return None
        return cls((int(task), int(rollout)), parts[1], parts[2])


def new_run_id() -> str:
    return os.urandom(8).hex()


def journal_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}{REPLAY_SUFFIX}")


def tagged(params: dict[str, Any], tag: ReplayTag) -> dict[str, Any]:
    """`params` (a row's create params) with the tag added to its metadata; the row's own metadata is kept."""
    metadata = params.get("metadata")
    return {**params, "metadata": {**(metadata if isinstance(metadata, dict) else {}), TAG_FIELD: tag.encode()}}


def take_tag(body: dict[str, Any]) -> ReplayTag | None:
    """Remove the tag from a model request `body` (in place; an emptied metadata goes too) and return it."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or TAG_FIELD not in metadata:
        return None
    rest = {key: value for key, value in metadata.items() if key != TAG_FIELD}
    if rest:
        body["metadata"] = rest
    else:
        del body["metadata"]
    return ReplayTag.decode(metadata[TAG_FIELD])


def without_tag(row: dict[str, Any]) -> dict[str, Any]:
    """`row` (an output row, which may echo the create params it ran with) as it was before it was tagged."""
    params = row.get("responses_create_params")
    if isinstance(params, dict) and isinstance(params.get("metadata"), dict) and TAG_FIELD in params["metadata"]:
        stripped = dict(params)
        take_tag(stripped)
        return {**row, "responses_create_params": stripped}
    return row


def request_digest(body: dict[str, Any]) -> str:
    """The same for the same request, whatever the order of its keys."""
    return hashlib.blake2b(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Recorded:
    """One journal line: a model call of rollout `key`, answered in run `run_id`."""

    key: tuple[int, int]
    run_id: str
    digest: str
    reply: Any

    def line(self) -> bytes:
        # Keyed as an output row is, so that compaction reads the key without parsing the reply (run_files.rows).
        return orjson.dumps(keyed(*self.key, {"run": self.run_id, "digest": self.digest, "reply": self.reply}),
                            option=orjson.OPT_APPEND_NEWLINE)


def read_journal(path: Path) -> Iterator[Recorded]:
    """Each whole record; a torn last line (a kill mid-write) and foreign lines are skipped."""
    for line in _lines(path):
        try:
            record = orjson.loads(line)
            yield Recorded((record[TASK_INDEX], record[ROLLOUT_INDEX]), str(record["run"]), str(record["digest"]),
                           record["reply"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue


def _lines(path: Path) -> Iterator[bytes]:
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        return
    with file:
        yield from file


def compact_journal(path: Path, keep: Callable[[tuple[int, int]], bool]) -> int:
    """Rewrite the journal to the records whose key `keep` accepts (atomically, by rename); remove it when none is
    left. Returns the records kept."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    kept = 0
    with open(tmp, "wb") as out:
        for line in _lines(path):
            key = row_key(line)
            if key is not None and line.endswith(b"\n") and keep(key):  # a torn last line has no newline
                out.write(line)
                kept += 1
    if kept:
        os.replace(tmp, path)
    else:
        tmp.unlink()
        path.unlink(missing_ok=True)
    return kept
