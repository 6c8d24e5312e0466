"""Structured log lines (one JSON object per line) with secrets scrubbed out before anything is written."""

import logging
import sys
import time
from contextvars import ContextVar

import orjson

_SECRETS: set[str] = set()
# In a process that serves several servers (server/colocated.py): the one whose code runs now. Each server's serving
# task sets it, the tasks it starts inherit it, and a call from one server to another sets the callee's for the call.
SERVING: ContextVar[str | None] = ContextVar("serving", default=None)


def register_secrets(values: set[str]) -> None:
    """Values that must never appear in a log line (API keys and tokens from the config)."""
    _SECRETS.update(v for v in values if v)


def scrub(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "***REDACTED***")
    return text


class JsonLineFormatter(logging.Formatter):
    """Each record as a JSON line naming the server it came from: the process's (`server`), or in a process that
    serves several, the one whose code logged it (`SERVING`)."""

    def __init__(self, server: str) -> None:
        super().__init__()
        self.server = server

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "server": SERVING.get() or self.server,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return scrub(orjson.dumps(entry, default=str).decode())


def configure_logging(server: str, level: str = "INFO") -> None:
    """Route our logs and uvicorn's through one JSON-line handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(server))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # One line per request would dominate the log and the CPU at thousands of requests per second.
    logging.getLogger("uvicorn.access").disabled = True
