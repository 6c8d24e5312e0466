"""The one way a benchmark draws: matplotlib without a display, and a PNG written where the docs link it."""

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display on these machines); imported only by a run that draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, png: Path) -> None:
    """Lay `fig` out, write it to `png` (its folder made if needed) and free it."""
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    pyplot().close(fig)
