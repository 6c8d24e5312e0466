"""What ng_run says while its servers start (a vLLM cold start takes minutes): every few seconds, which servers are
still starting, for how long, and the last line each one logged. The head server's `/status` gives the same for
`ng_status`."""

import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from nemo_gym.server.logs import scrub

PROGRESS_EVERY_S = 5.0  # between two progress lines
_TAIL_BYTES = 8192  # enough for the last line of any log
_SHOWN_CHARS = 160  # of a last log line
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def last_log_line(path: Path) -> str | None:
    """The last non-empty line of a server's log (its message, for one of our JSON lines), without terminal colours,
    cut to a width that fits a progress line, with secrets scrubbed; None when the log holds nothing yet."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - _TAIL_BYTES))
            tail = log.read()
    except OSError:
        return None
    # vLLM redraws progress bars with carriage returns: the text after the last one is what a terminal shows.
    lines = [line.rsplit("\r", 1)[-1].strip() for line in tail.decode(errors="replace").split("\n")]
    line = next((line for line in reversed(lines) if line), None)
    if line is None:
        return None
    if line.startswith("{"):
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("msg"), str):
            line = entry["msg"]
    line = _ANSI.sub("", line)
    return scrub(line if len(line) <= _SHOWN_CHARS else line[:_SHOWN_CHARS - 3] + "...")


@dataclass(frozen=True)
class Starting:
    """A server that does not answer /health with ok yet."""

    name: str
    started_s: float  # seconds since its process started
    last_log_line: str | None

    def describe(self) -> str:
        said = f'last log line: "{self.last_log_line}"' if self.last_log_line else "nothing logged yet"
        return f"{self.name} ({self.started_s:.0f} s; {said})"


def waiting_line(starting: list[Starting], total: int) -> str:
    """One progress line: how many of the `total` servers are still starting, and each of them."""
    return (f"still starting {len(starting)} of {total} servers: "
            + "; ".join(server.describe() for server in starting))
