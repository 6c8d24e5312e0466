"""`ng_view ... +export=report.html`: the overview and a sample of transcripts in one self-contained file (styles
and script inline, no network), to attach to a pull request or a W&B run.

The sample is chosen to be informative and reproducible: some failed rollouts, the lowest and the highest rewards,
and the rest spread evenly over the run in key order.
"""

from pathlib import Path

import numpy as np

from nemo_gym.viewer.compare import compare_runs
from nemo_gym.viewer.index import RunIndex
from nemo_gym.viewer.query import FAILURE_ANY, RowFilter, select
from nemo_gym.safe_html import Html, el, fragment, table
from nemo_gym.viewer.render_common import fmt, layout, runs_subtitle
from nemo_gym.viewer.render_rows import rows_table
from nemo_gym.viewer.render_transcript import transcript_html
from nemo_gym.viewer.summary import row_summary
from nemo_gym.viewer.transcript import transcript
from nemo_gym.viewer.views import Viewer, overview_body

DEFAULT_SAMPLE = 24


class AnchorUrls:
    """Links inside the exported file: a rollout links to its transcript further down; nothing else links."""

    def rollout(self, run: str, task: int, rollout: int) -> str:
        return f"#rollout-{run}-{task}-{rollout}"

    def task(self, run: str, task: int) -> None:
        return None

    def failures(self, run: str, failure_class: str) -> None:
        return None


def sample_positions(index: RunIndex, size: int) -> list[int]:
    """Up to `size` rows: a quarter failed, a quarter lowest reward, a quarter highest, the rest evenly spread."""
    quarter = max(1, size // 4)
    picked: dict[int, None] = {}
    for filt, sort, descending in ((RowFilter(failure=FAILURE_ANY), "key", False), (RowFilter(), "reward", False),
                                   (RowFilter(), "reward", True)):
        for position in select(index, filt, sort, descending, 0, quarter).positions:
            picked.setdefault(position, None)
    rows = index.rows.rows
    if rows and len(picked) < size:
        spread = np.linspace(0, rows - 1, num=min(rows, 4 * size)).astype(int).tolist()
        step = max(1, len(spread) // (size - len(picked)))
        for position in spread[::step] + spread:  # evenly spaced first, then whatever is left
            if len(picked) >= size:
                break
            picked.setdefault(position, None)
    return sorted(picked)


def _changed_summary(viewer: Viewer) -> Html:
    c = compare_runs(viewer.runs["a"], viewer.runs["b"], "all", "delta", 0, 50)
    rows = [(str(t.task), fmt(t.mean_a), fmt(t.mean_b), fmt(t.mean_b - t.mean_a)) for t in c.changed]
    return fragment(el("h2", "Tasks whose reward changed (B against A)"),
                    el("p", f"{c.total_changed:,} of {c.common:,} common tasks: {c.worse:,} worse, {c.better:,} "
                            f"better (largest drops first, at most 50 listed)", class_="facts"),
                    table(("task", "mean reward A", "mean reward B", "B − A"), rows, "rows changed"))


def export_report(viewer: Viewer, path: Path, sample: int = DEFAULT_SAMPLE) -> Path:
    urls = AnchorUrls()
    for index in viewer.runs.values():
        index.overview()  # a report holds the whole overview: wait for its background phase
    parts: list[Html] = [overview_body(viewer, urls)]
    if viewer.comparing:
        parts.append(_changed_summary(viewer))
    for label, index in viewer.runs.items():
        positions = sample_positions(index, sample)
        summaries = [row_summary(index, p) for p in positions]
        parts += [el("h2", f"Sample of {len(positions)} rollouts of run {label.upper()}"), rows_table(summaries, urls)]
        for s in summaries:
            heading = f"Run {label.upper()}, task {s['task']}, rollout {s['rollout']} ({s['agent']})"
            body = transcript_html(transcript(index.row(s["position"]), index.is_failure(s["position"])), heading)
            parts.append(el("div", body, id=f"rollout-{label}-{s['task']}-{s['rollout']}"))
    subtitle = runs_subtitle({label: index.input_glob for label, index in viewer.runs.items()})
    page = layout("ng_view report", parts, [], subtitle, inline_assets=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
