"""Filtering, sorting and paging the rows of a run without loading them.

Column filters (agent, task, reward range, failure class) and sorting are evaluated over the index's columns a
block of 65,536 rows at a time with numpy, so a query over a million rows costs a few tens of milliseconds and a few
MB. Sorting keeps only the best `offset + limit` rows while it scans (a running top-k). Text search has to read the
rows themselves: the candidates that pass the column filters are read by offset and searched in their prompt and
final answer (case-insensitive); in key order the scan stops as soon as the page is full, in any other order it
reads every candidate.
"""

from dataclasses import dataclass, field

import numpy as np
import orjson

from nemo_gym.viewer.columns import SCAN_ROWS
from nemo_gym.viewer.errors import ViewerError
from nemo_gym.viewer.index import LineReader, RunIndex
from nemo_gym.viewer.row_fields import answer_text, prompt_text

SORTS = ("key", "reward", "length", "tokens")
_SORT_COLUMN = {"reward": "reward", "length": "length", "tokens": "output_tokens"}
FAILURE_ANY = "any"  # any failure class
FAILURE_NONE = "none"  # succeeded rows only
MAX_LIMIT = 500


@dataclass(frozen=True)
class RowFilter:
    agent: str | None = None
    task: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    failure: str | None = None  # None: all rows; "none": succeeded; "any": failed; else one failure class
    text: str | None = None

    def active(self) -> bool:
        return any(value not in (None, "") for value in vars(self).values())


@dataclass
class Page:
    positions: list[int]
    total: int  # rows matching (a lower bound when `exact` is False)
    exact: bool
    scanned: int  # rows whose text was read for a text search
    offset: int = 0
    limit: int = 50
    notes: list[str] = field(default_factory=list)


def _column_mask(index: RunIndex, filt: RowFilter, columns: dict[str, np.ndarray]) -> np.ndarray:
    mask = np.ones(len(columns["task"]), dtype=bool)
    if filt.agent:
        if filt.agent not in index.agents:
            return np.zeros_like(mask)
        mask &= columns["agent"] == index.agents.index(filt.agent)
    if filt.task is not None:
        mask &= columns["task"] == filt.task
    reward = columns["reward"]
    if filt.reward_min is not None:
        mask &= reward >= filt.reward_min  # NaN (failed or unscored) never matches a range
    if filt.reward_max is not None:
        mask &= reward <= filt.reward_max
    if filt.failure == FAILURE_NONE:
        mask &= columns["failure"] == 0
    elif filt.failure == FAILURE_ANY:
        mask &= columns["failure"] != 0
    elif filt.failure:
        if filt.failure not in index.failure_classes:
            return np.zeros_like(mask)
        mask &= columns["failure"] == index.failure_classes.index(filt.failure)
    return mask


class TextMatcher:
    """Case-insensitive search of the prompt and final answer; a cheap byte test on the raw line goes first."""

    def __init__(self, text: str) -> None:
        self.needle = text.lower()
        # How the needle appears inside a JSON string (quotes, backslashes and control characters escaped).
        self._raw = orjson.dumps(text)[1:-1].lower()

    def matches(self, line: bytes) -> bool:
        if self._raw not in line.lower():
            return False
        row = orjson.loads(line)
        searched = [prompt_text(row), answer_text(row), str(row.get("last_error") or "")]
        return any(self.needle in text.lower() for text in searched)


def _sort_values(column: str, values: np.ndarray, descending: bool) -> np.ndarray:
    """Values to sort ascending by; unknown values (NaN reward, -1 tokens) sort last either way."""
    values = values.astype(np.float64)
    unknown = np.isnan(values) | ((values < 0) if column != "reward" else False)
    values = -values if descending else values
    return np.where(unknown, np.inf, values)


def select(index: RunIndex, filt: RowFilter, sort: str = "key", descending: bool = False, offset: int = 0,
           limit: int = 50) -> Page:
    """The rows of page [offset, offset + limit) of `index` under `filt`, in the order asked for."""
    if sort not in SORTS:
        raise ViewerError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    if offset < 0 or not 1 <= limit <= MAX_LIMIT:
        raise ViewerError(f"offset must be >= 0 and limit within 1..{MAX_LIMIT}")
    matcher = TextMatcher(filt.text) if filt.text else None
    wanted = offset + limit
    names = ("task", "agent", "reward", "failure") + ((_SORT_COLUMN[sort],) if sort != "key" else ())
    if matcher is not None:
        names += ("file", "offset", "length")
    total, scanned, exact = 0, 0, True
    kept_pos = np.empty(0, np.int64)
    kept_val = np.empty(0, np.float64)
    with LineReader(index) as reader:
        for start, columns in index.rows.chunks(tuple(dict.fromkeys(names)), SCAN_ROWS):
            mask = _column_mask(index, filt, columns)
            hits = np.flatnonzero(mask)
            if matcher is not None:
                matched = []
                files, starts, lengths = (columns[name][hits].tolist() for name in ("file", "offset", "length"))
                for hit, file_no, byte_offset, length in zip(hits.tolist(), files, starts, lengths):
                    if sort == "key" and total >= wanted:
                        exact = False
                        break
                    scanned += 1
                    if matcher.matches(reader.read(file_no, byte_offset, length)):
                        matched.append(hit)
                        total += 1
                hits = np.array(matched, dtype=np.int64)
                if not exact:
                    kept_pos = np.concatenate([kept_pos, start + hits])
                    break
            else:
                total += len(hits)
            if sort == "key":
                if len(kept_pos) < wanted:
                    kept_pos = np.concatenate([kept_pos, start + hits[:wanted - len(kept_pos)]])
                continue
            column = _SORT_COLUMN[sort]
            kept_pos = np.concatenate([kept_pos, start + hits])
            kept_val = np.concatenate([kept_val, _sort_values(column, columns[column][hits], descending)])
            if len(kept_pos) > wanted:
                order = np.lexsort((kept_pos, kept_val))[:wanted]  # ties keep key order
                kept_pos, kept_val = kept_pos[order], kept_val[order]
    if sort != "key":
        order = np.lexsort((kept_pos, kept_val))
        kept_pos = kept_pos[order]
    page = Page(kept_pos[offset:wanted].tolist(), total, exact, scanned, offset, limit)
    if not exact:
        page.notes.append(f"text search stopped after filling this page ({scanned} rows read); "
                          f"at least {total} rows match")
    return page
