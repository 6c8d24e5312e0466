"""What a command prints, and where each kind of line goes: the one owner of the console (docs/architecture.md,
"Console output", has the table).

- `say`: what the command did or is doing, one line ("collecting 50 of 50 rollouts ...", "all servers healthy"):
  standard output.
- `warn`: something the user should know that does not stop the command: standard error, `warning: ` first.
- `error`: why the command stopped: standard error, `error: ` first; the exit status is not 0 (`interrupted`: it
  was stopped by Ctrl-C or SIGTERM).
- `progress`: a line of a long job's progress ("[collect] 120/500 rollouts ..."): standard error, so that standard
  output stays what the command produced.
- `emit`: what the command produces (a table, a config, `--help`, a version): standard output, as it is.
- `detail`: what only `NG_VERBOSITY=verbose` shows: standard error.

`NG_VERBOSITY=quiet` drops `say` and `progress` (warnings, errors and what the command produces stay);
`verbose` adds `detail`. The collector copies all of it into its run's log, `<stem>_collect.log`
(rollout_collection/run_log.py tees both streams while the run lasts).
"""

import os
import sys

QUIET, NORMAL, VERBOSE = "quiet", "normal", "verbose"
VERBOSITY_ENV = "NG_VERBOSITY"


def verbosity() -> str:
    """The level `NG_VERBOSITY` asks for (normal when unset or not a level)."""
    level = os.environ.get(VERBOSITY_ENV, NORMAL).strip().lower()
    return level if level in (QUIET, NORMAL, VERBOSE) else NORMAL


def say(message: str) -> None:
    if verbosity() != QUIET:
        print(message, flush=True)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def interrupted() -> None:
    """The command was stopped by Ctrl-C or SIGTERM: standard error."""
    print("interrupted", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    if verbosity() != QUIET:
        print(line, file=sys.stderr, flush=True)


def emit(text: str, end: str = "\n") -> None:
    print(text, end=end, flush=True)


def detail(message: str) -> None:
    if verbosity() == VERBOSE:
        print(message, file=sys.stderr, flush=True)
