"""What every console script shares: `--help` from its typed settings, one-line errors, and exit statuses.

Exit status: 0 success; 2 bad input (`NemoGymError`: config, data, command line — fix the command, nothing was run);
1 a downstream failure (`DownstreamError`: a rollout, a server, the network or an external tool; the same command
may succeed later); 75 a downstream service that refuses to serve for a while (`RetryLaterError`: a model endpoint's
spent quota; run the same command again once it serves); 130 interrupted.
"""

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import yaml
from pydantic import BaseModel

import nemo_gym
from nemo_gym import console
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.config.help import help_lines
from nemo_gym.config.loader import GlobalConfig, load_global_config
from nemo_gym.config.redact import redact_everywhere
from nemo_gym.config.typed import build
from nemo_gym.errors import DownstreamError, NemoGymError, RetryLaterError
from nemo_gym.exit_status import EXIT_BAD_INPUT, EXIT_DOWNSTREAM, EXIT_INTERRUPTED, EXIT_RETRY_LATER

HELP_FLAGS = ("-h", "--help")
VERSION_FLAG = "--version"


def version() -> str:
    """The package's own version (tests/config/test_shortcuts.py keeps it equal to pyproject's). Not the installed
    distribution's: NeMo Gym's distribution has the same name, and may be what the metadata finds."""
    return nemo_gym.__version__


@dataclass(frozen=True)
class CommandHelp:
    """What `<command> --help` prints: the command's docstring, then each group of typed options."""

    command: str
    doc: str
    options: list[tuple[str, type[BaseModel], str]] = field(default_factory=list)  # (title, settings, key prefix)
    notes: str = ""

    def render(self) -> str:
        usage = f"usage: {self.command} [+key=value ...]" if self.options else f"usage: {self.command}"
        lines = [usage, "", self.doc.strip(), ""]
        for title, settings, prefix in self.options:
            lines += [f"{title}:", *help_lines(settings, prefix), ""]
        if not self.options:
            lines += [f"{self.command} takes no options (only --help and --version).", ""]
        if self.notes:
            lines += [self.notes.strip(), ""]
        if self.options:
            lines.append("Every option is a Hydra-style override (+key=value); docs/configuration.md lists them all.")
        lines.append(f"{VERSION_FLAG} prints the version.")
        return "\n".join(lines)


def load_config(argv: Sequence[str], require_complete: bool = True) -> GlobalConfig:
    """The command's global config; with +print_config=true, print it (secrets redacted) and exit 0 instead."""
    config = load_global_config(argv, require_complete=require_complete)
    if build(LoaderSettings, config.values).print_config:
        shown = {key: value for key, value in config.values.items() if key != "print_config"}
        console.emit(yaml.safe_dump(redact_everywhere(shown), sort_keys=False, default_flow_style=False), end="")
        sys.exit(0)
    return config


def run_cli(main: Callable[[list[str]], int | None], command_help: CommandHelp | None = None) -> None:
    if VERSION_FLAG in sys.argv[1:]:
        command = command_help.command if command_help else Path(sys.argv[0]).name
        console.emit(f"{command} (nemo_gym) {version()}")
        sys.exit(0)
    if command_help is not None and any(arg in HELP_FLAGS for arg in sys.argv[1:]):
        console.emit(command_help.render())
        sys.exit(0)
    try:
        code = main(sys.argv[1:])
    except NemoGymError as exc:
        console.error(str(exc))
        sys.exit(EXIT_BAD_INPUT)
    except RetryLaterError as exc:
        console.error(str(exc))
        sys.exit(EXIT_RETRY_LATER)
    except DownstreamError as exc:
        console.error(str(exc))
        sys.exit(EXIT_DOWNSTREAM)
    except KeyboardInterrupt:
        console.interrupted()
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
    # No padding after the last column: a line ends where its text does.
    console.emit("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        console.emit("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns).rstrip())
