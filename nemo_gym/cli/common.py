"""What every console script shares: one-line errors and a non-zero exit instead of tracebacks.

Exit status: 2 for bad input (`NemoGymError`: fix the command), 1 for a downstream failure (`DownstreamError`: a
server, the network or an external tool; the same command may succeed later), 130 when interrupted.
"""

import signal
import sys
from typing import Callable

from nemo_gym.errors import DownstreamError, NemoGymError

EXIT_DOWNSTREAM = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def run_cli(main: Callable[[list[str]], int | None]) -> None:
    try:
        code = main(sys.argv[1:])
    except NemoGymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except DownstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_DOWNSTREAM)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or 0)


def _sigterm_as_sigint(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


def stop_on_sigterm_like_ctrl_c() -> None:
    """Make SIGTERM (scancel, SLURM preemption) stop the command exactly like Ctrl-C.

    SIGTERM is re-raised as SIGINT so asyncio's Runner cancels the run: a KeyboardInterrupt raised inside a uvloop
    transport callback would be swallowed there and the run would go on. SIGINT is (re)armed as well, since a shell
    starts background jobs with it ignored, and an ignored SIGINT would then make SIGTERM a no-op.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm_as_sigint)


def print_table(rows: list[dict[str, str]], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))
