"""A model server's side of replay (nemo_gym.model_call_replay): a tagged call is answered from its rollout's
journal where an earlier run recorded it, else by the endpoint, and then recorded.

Each server process keeps, per journal, the records earlier runs left (read once, when the first call of a new run
arrives) and a file descriptor it appends to: one `write` per record, so that lines of several worker processes
never interleave and a record is in the file, for a later run to read, as soon as its reply is sent. A journal this
process cannot open or write (the output's folder is not on this machine) costs the call nothing: it is answered,
unrecorded, and the failure is logged once.
"""

import logging
import os
from collections import deque
from pathlib import Path
from typing import Any, Awaitable, Callable

from nemo_gym.model_call_replay import Recorded, ReplayTag, read_journal, request_digest, take_tag
from nemo_gym.model_calls import REPLAYED_FIELD, REPLY_FIELD

logger = logging.getLogger(__name__)
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]  # a json_route handler: (body, request) -> reply


class _Journal:
    """One journal, as this process uses it during one run."""

    def __init__(self, path: str, run_id: str) -> None:
        self.run_id = run_id
        self._recorded: dict[tuple[tuple[int, int], str], deque[Any]] = {}
        for record in read_journal(Path(path)):
            if record.run_id != run_id:
                self._recorded.setdefault((record.key, record.digest), deque()).append(record.reply)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def take(self, key: tuple[int, int], digest: str) -> Any | None:
        """The reply an earlier run recorded for this call, each at most once; None when there is none."""
        replies = self._recorded.get((key, digest))
        if not replies:
            return None
        return replies.popleft()

    def append(self, record: Recorded) -> None:
        if self._fd is not None:
            os.write(self._fd, record.line())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Journals:
    """The journals one server process answers and records tagged calls with."""

    def __init__(self) -> None:
        self._open: dict[str, _Journal] = {}
        # Per journal this process could not use, the run it failed for: not tried again on each of that run's calls,
        # and logged once per journal.
        self._failed: dict[str, str] = {}

    def _journal(self, tag: ReplayTag) -> _Journal | None:
        journal = self._open.get(tag.journal)
        if journal is not None and journal.run_id == tag.run_id:
            return journal
        if self._failed.get(tag.journal) == tag.run_id:
            return None
        if journal is not None:  # a new run: the file may have been compacted, and earlier runs are now more
            journal.close()
            del self._open[tag.journal]
        try:
            journal = self._open[tag.journal] = _Journal(tag.journal, tag.run_id)
        except OSError as exc:
            if tag.journal not in self._failed:
                logger.warning("cannot use the replay journal %s (%s): calls are answered without it",
                               tag.journal, exc.strerror)
            self._failed[tag.journal] = tag.run_id
            return None
        return journal

    async def answer(self, body: dict[str, Any], endpoint: Callable[[dict[str, Any]], Awaitable[Any]]) -> Any:
        """The reply to `body`: from the journal when an earlier run recorded it, else `endpoint(body)`, recorded."""
        tag = take_tag(body)
        if tag is None:
            return await endpoint(body)
        journal = self._journal(tag)
        if journal is None:
            return await endpoint(body)
        digest = request_digest(body)
        recorded = journal.take(tag.key, digest)
        if recorded is not None:
            return _marked_replayed(recorded)
        reply = await endpoint(body)
        try:
            journal.append(Recorded(tag.key, tag.run_id, digest, reply))
        except OSError as exc:
            logger.warning("cannot append to the replay journal %s (%s)", tag.journal, exc.strerror)
        return reply

    def close(self) -> None:
        for journal in self._open.values():
            journal.close()
        self._open.clear()


def _marked_replayed(reply: Any) -> Any:
    """The recorded reply, its call record (where it has one) saying it was answered from the journal."""
    if isinstance(reply, dict) and isinstance(reply.get(REPLY_FIELD), dict):
        return {**reply, REPLY_FIELD: {**reply[REPLY_FIELD], REPLAYED_FIELD: True}}
    return reply


def replayable(journals: Journals, handler: Handler) -> Handler:
    """`handler` (a model route's) with tagged calls answered and recorded through `journals`."""

    async def answer(body: dict[str, Any], request: Any) -> Any:
        if not isinstance(body, dict):
            return await handler(body, request)
        return await journals.answer(body, lambda untagged: handler(untagged, request))

    return answer
