"""`<stem>_report.html`: what a user looks at after a run — key metrics, the pass@k curve, the reward histogram.

One self-contained file (inline SVG, no scripts, no network), so it opens from a cluster's shared disk, a W&B
artifact or an e-mail attachment alike. The charts are drawn here rather than with a plotting library to keep the
collector's dependencies small; they are two simple shapes.
"""

import html
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

WIDTH, HEIGHT, PAD = 420, 240, 40


@dataclass
class AgentReport:
    agent: str
    key_metrics: dict[str, float]
    agent_metrics: dict[str, float]
    pass_at_k: dict[int, float]
    reward_histogram: tuple[list[float], list[int]]
    failures_by_class: dict[str, int] = field(default_factory=dict)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def _table(rows: dict[str, object], header: tuple[str, str]) -> str:
    body = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{_fmt(v)}</td></tr>" for k, v in rows.items())
    return f"<table><tr><th>{header[0]}</th><th>{header[1]}</th></tr>{body}</table>"


def _axes(x_label: str, y_label: str) -> str:
    return (f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 10}" y2="{HEIGHT - PAD}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#333"/>'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 5}" text-anchor="middle">{x_label}</text>'
            f'<text x="12" y="{HEIGHT / 2}" transform="rotate(-90 12 {HEIGHT / 2})" '
            f'text-anchor="middle">{y_label}</text>')


def pass_at_k_svg(pass_at_k: dict[int, float]) -> str:
    """pass@k against k on a log2 axis, y from 0 to 1."""
    points = [(k, v) for k, v in sorted(pass_at_k.items()) if not math.isnan(v)]
    if not points:
        return "<p>no pass@k (no rewards)</p>"
    top = math.log2(max(k for k, _ in points)) or 1.0
    plot_w, plot_h = WIDTH - PAD - 50, HEIGHT - PAD - 30  # room for the value labels

    def xy(k: int, v: float) -> tuple[float, float]:
        return PAD + 10 + plot_w * math.log2(k) / top, HEIGHT - PAD - plot_h * v

    marks = []
    for k, v in points:
        x, y = xy(k, v)
        marks.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#1f77b4"/>'
                     f'<text x="{x:.1f}" y="{y - 8:.1f}" text-anchor="middle">{v:.3f}</text>'
                     f'<text x="{x:.1f}" y="{HEIGHT - PAD + 14}" text-anchor="middle">{k}</text>')
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(k, v) for k, v in points))
    return (f'<svg class="pass-at-k" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'{_axes("k", "pass@k")}<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="2"/>'
            f'{"".join(marks)}</svg>')


def histogram_svg(edges: list[float], counts: list[int]) -> str:
    if not counts:
        return "<p>no rewards</p>"
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - PAD - 20
    top = max(counts) or 1
    bar_w = plot_w / len(counts)
    bars = "".join(
        f'<rect x="{PAD + 10 + i * bar_w:.1f}" y="{HEIGHT - PAD - plot_h * c / top:.1f}" width="{bar_w - 1:.1f}" '
        f'height="{plot_h * c / top:.1f}" fill="#ff7f0e"><title>[{edges[i]:.3g}, {edges[i + 1]:.3g}): {c}</title>'
        f"</rect>"
        for i, c in enumerate(counts)
    )
    labels = (f'<text x="{PAD + 10}" y="{HEIGHT - PAD + 14}">{edges[0]:.3g}</text>'
              f'<text x="{WIDTH - 10}" y="{HEIGHT - PAD + 14}" text-anchor="end">{edges[-1]:.3g}</text>'
              f'<text x="{PAD + 2}" y="20">{top}</text>')
    return (f'<svg class="histogram" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'{_axes("reward", "rollouts")}{bars}{labels}</svg>')


_STYLE = """body{font-family:sans-serif;margin:24px;color:#222}h2{border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 16px 8px 0;display:inline-table;vertical-align:top}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}svg{margin:8px;font-size:11px}
.charts{display:flex;flex-wrap:wrap}"""


def viewer_command(rollout_files: Sequence[str]) -> str:
    """The ng_view command that opens these rollout files in the browser viewer."""
    return "ng_view " + shlex.quote("+input_glob=" + ",".join(rollout_files))


def render_report(agents: list[AgentReport], title: str, notes: list[str],
                  rollout_files: Sequence[str] = ()) -> str:
    sections = []
    for agent in agents:
        counts = {k: agent.agent_metrics.get(k) for k in ("num_rollouts", "num_tasks", "num_failed", "failure_rate")
                  if k in agent.agent_metrics}
        failures = _table(agent.failures_by_class, ("failure class", "rollouts")) if agent.failures_by_class else ""
        sections.append(
            f"<section><h2>{html.escape(agent.agent)}</h2>"
            f"{_table(agent.key_metrics, ('key metric', 'value'))}{_table(counts, ('count', 'value'))}{failures}"
            f'<div class="charts">{pass_at_k_svg(agent.pass_at_k)}{histogram_svg(*agent.reward_histogram)}</div>'
            f"<details><summary>all metrics</summary>{_table(agent.agent_metrics, ('metric', 'value'))}</details>"
            f"</section>"
        )
    note_items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    if rollout_files:
        note_items += (f'<li>browse, filter and compare these rollouts: <code class="viewer-command">'
                       f"{html.escape(viewer_command(rollout_files))}</code></li>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>Rollout report: {html.escape(title)}</h1>"
            f"<ul>{note_items}</ul>{''.join(sections)}</body></html>")


def write_report(path: Path, agents: list[AgentReport], title: str, notes: list[str],
                 rollout_files: Sequence[str] = ()) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(agents, title, notes, rollout_files), encoding="utf-8")
    tmp.replace(path)
    return path
