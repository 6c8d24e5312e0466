"""What every console script shares: `--help` from its typed settings, one-line errors, and exit statuses.

Exit status: 0 success; 2 bad input (`NemoGymError`: config, data, command line — fix the command, nothing was run);
1 a downstream failure (`DownstreamError`: a rollout, a server, the network or an external tool; the same command
may succeed later); 130 interrupted.
"""

import signal
import sys
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel

from nemo_gym.config.help import help_lines
from nemo_gym.errors import DownstreamError, NemoGymError

EXIT_DOWNSTREAM = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

HELP_FLAGS = ("-h", "--help")


@dataclass(frozen=True)
class CommandHelp:
    """What `<command> --help` prints: the command's docstring, then each group of typed options."""

    command: str
    doc: str
    options: list[tuple[str, type[BaseModel], str]] = field(default_factory=list)  # (title, settings, key prefix)
    notes: str = ""

    def render(self) -> str:
        lines = [f"usage: {self.command} [+key=value ...]", "", self.doc.strip(), ""]
        for title, settings, prefix in self.options:
            lines += [f"{title}:", *help_lines(settings, prefix), ""]
        if not self.options:
            lines += ["This command takes no options.", ""]
        if self.notes:
            lines += [self.notes.strip(), ""]
        lines.append("Every option is a Hydra-style override (+key=value); docs/configuration.md lists them all.")
        return "\n".join(lines)


def run_cli(main: Callable[[list[str]], int | None], command_help: CommandHelp | None = None) -> None:
    if command_help is not None and any(arg in HELP_FLAGS for arg in sys.argv[1:]):
        print(command_help.render())
        sys.exit(0)
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
