"""`<stem>_report.html`: what a user looks at after a run — key metrics, the pass@k curve, the reward histogram.

One self-contained file (inline SVG, no scripts, no network), so it opens from a cluster's shared disk, a W&B
artifact or an e-mail attachment alike. It is built with nemo_gym.safe_html, as the viewer's pages are: agent names,
metric names and failure classes come from the run and are text. The charts are drawn here rather than with a
plotting library to keep the collector's dependencies small; they are two simple shapes.
"""

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from nemo_gym.safe_html import Child, Html, document, el, fragment, table, trusted

WIDTH, HEIGHT, PAD = 420, 240, 40
COUNTS = ("num_rollouts", "num_tasks", "num_failed", "failure_rate")


@dataclass
class AgentReport:
    agent: str
    key_metrics: dict[str, float]
    agent_metrics: dict[str, float]
    pass_at_k: dict[int, float]
    reward_histogram: tuple[list[float], list[int]]
    failures_by_class: dict[str, int] = field(default_factory=dict)
    model_calls: list[dict[str, object]] = field(default_factory=list)  # per endpoint (metrics.call_metrics)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _table(rows: Mapping[str, object], header: tuple[str, str]) -> Html:
    return table(header, ((key, _fmt(value)) for key, value in rows.items()))


# The per-endpoint model-call figures the report and the viewer show: (heading, call_metrics summary key).
MODEL_CALL_COLUMNS = (("calls", "count"), ("per rollout", "per_rollout"), ("latency p50 s", "latency_p50_s"),
                      ("p95 s", "latency_p95_s"), ("p99 s", "latency_p99_s"), ("mean wait s", "wait_mean_s"),
                      ("output tokens/s", "output_tokens_per_s"), ("429s", "rate_limited"), ("retries", "retries"),
                      ("cost USD", "cost_usd"))


def model_calls_table(endpoints: Sequence[Mapping[str, object]]) -> Html | None:
    """One row per endpoint: calls, latency percentiles, waits, output tokens per second, 429s, retries, cost."""
    if not endpoints:
        return None
    rows = [(str(entry["endpoint"]), *(_fmt(entry.get(key, "")) for _, key in MODEL_CALL_COLUMNS))
            for entry in endpoints]
    return el("div", el("h3", "model calls per endpoint"),
              table(("endpoint", *(heading for heading, _ in MODEL_CALL_COLUMNS)), rows, "model-calls"))


def _axes(x_label: str, y_label: str) -> Html:
    return fragment(el("line", x1=PAD, y1=HEIGHT - PAD, x2=WIDTH - 10, y2=HEIGHT - PAD, stroke="#333"),
                    el("line", x1=PAD, y1=10, x2=PAD, y2=HEIGHT - PAD, stroke="#333"),
                    el("text", x_label, x=WIDTH / 2, y=HEIGHT - 5, text_anchor="middle"),
                    el("text", y_label, x=12, y=HEIGHT / 2, transform=f"rotate(-90 12 {HEIGHT / 2})",
                       text_anchor="middle"))


def _svg(css: str, *children: Child) -> Html:
    return el("svg", *children, class_=css, width=WIDTH, height=HEIGHT, xmlns="http://www.w3.org/2000/svg")


def pass_at_k_svg(pass_at_k: dict[int, float]) -> Html:
    """pass@k against k on a log2 axis, y from 0 to 1."""
    points = [(k, v) for k, v in sorted(pass_at_k.items()) if not math.isnan(v)]
    if not points:
        return el("p", "no pass@k (no rewards)")
    top = math.log2(max(k for k, _ in points)) or 1.0
    plot_w, plot_h = WIDTH - PAD - 50, HEIGHT - PAD - 30  # room for the value labels

    def xy(k: int, v: float) -> tuple[float, float]:
        return PAD + 10 + plot_w * math.log2(k) / top, HEIGHT - PAD - plot_h * v

    marks = []
    for k, v in points:
        x, y = xy(k, v)
        marks += [el("circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r=4, fill="#1f77b4"),
                  el("text", f"{v:.3f}", x=f"{x:.1f}", y=f"{y - 8:.1f}", text_anchor="middle"),
                  el("text", k, x=f"{x:.1f}", y=HEIGHT - PAD + 14, text_anchor="middle")]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(k, v) for k, v in points))
    return _svg("pass-at-k", _axes("k", "pass@k"),
                el("polyline", points=line, fill="none", stroke="#1f77b4", stroke_width=2), marks)


def histogram_svg(edges: list[float], counts: list[int]) -> Html:
    if not counts:
        return el("p", "no rewards")
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - PAD - 20
    top = max(counts) or 1
    bar_w = plot_w / len(counts)
    bars = [el("rect", el("title", f"[{edges[i]:.3g}, {edges[i + 1]:.3g}): {c}"), x=f"{PAD + 10 + i * bar_w:.1f}",
               y=f"{HEIGHT - PAD - plot_h * c / top:.1f}", width=f"{bar_w - 1:.1f}", height=f"{plot_h * c / top:.1f}",
               fill="#ff7f0e")
            for i, c in enumerate(counts)]
    labels = [el("text", f"{edges[0]:.3g}", x=PAD + 10, y=HEIGHT - PAD + 14),
              el("text", f"{edges[-1]:.3g}", x=WIDTH - 10, y=HEIGHT - PAD + 14, text_anchor="end"),
              el("text", top, x=PAD + 2, y=20)]
    return _svg("histogram", _axes("reward", "rollouts"), bars, labels)


_STYLE = """body{font-family:sans-serif;margin:24px;color:#222}h2{border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 16px 8px 0;display:inline-table;vertical-align:top}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}svg{margin:8px;font-size:11px}
.charts{display:flex;flex-wrap:wrap}"""


def viewer_command(rollout_files: Sequence[str]) -> str:
    """The ng_view command that opens these rollout files in the browser viewer."""
    return "ng_view " + shlex.quote("+input_glob=" + ",".join(rollout_files))


def render_report(agents: list[AgentReport], title: str, notes: list[str],
                  rollout_files: Sequence[str] = ()) -> Html:
    sections = []
    for agent in agents:
        counts: dict[str, object] = {k: agent.agent_metrics.get(k) for k in COUNTS if k in agent.agent_metrics}
        failures = _table(agent.failures_by_class, ("failure class", "rollouts")) if agent.failures_by_class else None
        sections.append(el(
            "section", el("h2", agent.agent), _table(agent.key_metrics, ("key metric", "value")),
            _table(counts, ("count", "value")), failures, model_calls_table(agent.model_calls),
            el("div", pass_at_k_svg(agent.pass_at_k), histogram_svg(*agent.reward_histogram), class_="charts"),
            el("details", el("summary", "all metrics"), _table(agent.agent_metrics, ("metric", "value")))))
    note_items = [el("li", note) for note in notes]
    if rollout_files:
        note_items.append(el("li", "browse, filter and compare these rollouts: ",
                             el("code", viewer_command(rollout_files), class_="viewer-command")))
    return document(title, el("style", trusted(_STYLE)),
                    [el("h1", f"Rollout report: {title}"), el("ul", note_items), sections])


def write_report(path: Path, agents: list[AgentReport], title: str, notes: list[str],
                 rollout_files: Sequence[str] = ()) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(agents, title, notes, rollout_files), encoding="utf-8")
    tmp.replace(path)
    return path
