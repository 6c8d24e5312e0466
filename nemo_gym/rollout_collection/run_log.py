"""The collector's own log, `<stem>_collect.log` next to its output: every line it prints (progress, warnings,
the summary, the error that stopped it), appended per run with a header, so a run on a cluster node can be read
after the fact without the job's stdout."""

import asyncio
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TextIO, cast


class _Tee:
    """A text stream that writes to `stream` and copies to the log; a terminal's redraws (\\r) stay off the log."""

    def __init__(self, stream: TextIO, log: TextIO) -> None:
        self._stream = stream
        self._log = log

    def write(self, text: str) -> int:
        if "\r" not in text:
            self._log.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._log.flush()
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


class RunLog:
    """While open, standard output and error are also appended to `path`; `tee` copies another stream there."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None
        self._saved: tuple[TextIO, TextIO] | None = None

    def __enter__(self) -> "RunLog":
        self._file = open(self.path, "a", buffering=1)
        self._file.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(sys.argv)}\n")
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _Tee(sys.stdout, self._file), _Tee(sys.stderr, self._file)
        return self

    def tee(self, stream: TextIO) -> TextIO:
        assert self._file is not None, "tee() is called inside the with block"
        # A _Tee is the stream it wraps for every caller: it writes to both and forwards every other attribute.
        return stream if isinstance(stream, _Tee) else cast(TextIO, _Tee(stream, self._file))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._saved is not None and self._file is not None, "__enter__ has run"
        sys.stdout, sys.stderr = self._saved
        if exc is not None:
            # Ctrl-C and SIGTERM cancel the run: the exception that arrives here is either of these two.
            interrupted = isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError))
            reason = "interrupted" if interrupted else f"error: {type(exc).__name__}: {exc}"
            self._file.write(f"stopped: {reason}\n")
        self._file.close()
