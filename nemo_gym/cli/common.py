"""What every console script shares: one-line errors and a non-zero exit instead of tracebacks."""

import sys
from typing import Callable

from nemo_gym.errors import NemoGymError


def run_cli(main: Callable[[list[str]], int | None]) -> None:
    try:
        code = main(sys.argv[1:])
    except NemoGymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)


def print_table(rows: list[dict[str, str]], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))
