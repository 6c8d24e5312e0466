"""The run overview: per agent, the key metrics with their 95% interval, counts, pass@k, the reward histogram,
failures by class, every metric, and the run's manifest. Two runs side by side in compare mode."""

from typing import Any, Callable

import orjson

from nemo_gym.metrics.report import histogram_svg, pass_at_k_svg
from nemo_gym.viewer.index import RunIndex
from nemo_gym.viewer.render_common import esc, fmt, kv_table, table

COUNTS = ("num_rollouts", "num_tasks", "num_failed", "failure_rate")
FailureLink = Callable[[str, str], str | None]  # (run, failure class) -> href


def _interval(metrics: dict[str, Any], name: str) -> str:
    """'[low, high]' for a metric with a ci95 pair in the metrics (mean/reward has one)."""
    field = name.split("/", 1)[1] if "/" in name else name
    low, high = metrics.get(f"ci95_low/{field}"), metrics.get(f"ci95_high/{field}")
    if name.startswith("mean/") and low is not None and high is not None:
        return f"[{fmt(low)}, {fmt(high)}]"
    return ""


def _key_metrics(entry: dict[str, Any]) -> str:
    metrics = entry["agent_metrics"]
    rows = [(esc(name), f'<b class="metric">{fmt(value)}</b>', _interval(metrics, name))
            for name, value in entry["key_metrics"].items() if not name.startswith("ci95_")]
    return table(("key metric", "value", "95% interval"), rows, "metrics")


def _failures(entry: dict[str, Any], run: str, link: FailureLink) -> str:
    failures = entry["failures_by_class"]
    if not failures:
        return '<p class="muted">no failed rollouts</p>'
    rows = []
    for cls, count in sorted(failures.items(), key=lambda kv: -kv[1]):
        href = link(run, cls)
        label = f'<a href="{esc(href)}">{esc(cls)}</a>' if href else esc(cls)
        rows.append((label, fmt(count)))
    return table(("failure class", "rollouts"), rows, "failures")


def agent_section(entry: dict[str, Any], run: str, link: FailureLink) -> str:
    metrics = entry["agent_metrics"]
    counts = {name: metrics[name] for name in COUNTS if name in metrics}
    pass_at_k = {int(k): (v if v is not None else float("nan")) for k, v in entry["pass_at_k"].items()}
    edges, counts_hist = entry["histogram"]
    source = ("library and environment metrics" if entry.get("environment_metrics")
              else "library metrics computed by the viewer")
    return (f'<section class="agent"><h3>{esc(entry["agent"])}</h3><p class="muted">{source}</p>'
            f'<div class="tables">{_key_metrics(entry)}{kv_table(counts, ("count", "value"))}'
            f'{_failures(entry, run, link)}</div>'
            f'<div class="charts">{pass_at_k_svg(pass_at_k)}{histogram_svg(edges, counts_hist)}</div>'
            f"<details><summary>all metrics ({len(metrics)})</summary>{kv_table(metrics, ('metric', 'value'))}"
            f"</details></section>")


def run_overview(index: RunIndex, link: FailureLink) -> str:
    meta = index.meta
    files = "".join(f"<li><code>{esc(p)}</code></li>" for p in index.rollout_files)
    facts = (f'<p class="facts"><b>{meta["rows"]:,}</b> rows (<b>{meta["failures"]:,}</b> failed) over '
             f'<b>{meta["tasks"]:,}</b> tasks, agents: {esc(", ".join(meta["agents"]) or "none")}'
             + (f', {meta["duplicates"]:,} duplicate copies dropped' if meta["duplicates"] else "") + "</p>")
    head = (f'<section class="run" id="run-{index.label}"><h2>Run {index.label.upper()}: '
            f"<code>{esc(index.input_glob)}</code></h2>{facts}<ul class=files>{files}</ul>")
    job = index.overview_job
    if not job.ready:  # the rollout table works already; this page reloads itself until the metrics are in
        return (f'{head}<meta http-equiv="refresh" content="2"><p class="muted">computing the metrics of this run: '
                f"{job.rows_done:,} of {job.total_rows:,} rows read ...</p></section>")
    overview = index.overview()
    agents = "".join(agent_section(entry, index.label, link) for entry in overview["agents"])
    manifests = "".join(
        f"<details><summary>manifest of <code>{esc(m['file'])}</code></summary>"
        f"<pre>{esc(orjson.dumps(m['manifest'], option=orjson.OPT_INDENT_2).decode())}</pre></details>"
        for m in overview["manifests"]) or '<p class="muted">no manifest next to these files</p>'
    return f"{head}{agents}<h3>Manifest</h3>{manifests}</section>"


def key_metric_deltas(a: RunIndex, b: RunIndex) -> str:
    """Per agent present in both runs: each key metric of A, of B, and B - A (once both runs' metrics are in)."""
    if not (a.overview_job.ready and b.overview_job.ready):
        return ""
    b_agents = {entry["agent"]: entry for entry in b.overview()["agents"]}
    rows = []
    for entry in a.overview()["agents"]:
        other = b_agents.get(entry["agent"])
        if other is None:
            continue
        for name, value in entry["key_metrics"].items():
            if name.startswith("ci95_") or name not in other["key_metrics"]:
                continue
            theirs = other["key_metrics"][name]
            delta = theirs - value if isinstance(theirs, (int, float)) and isinstance(value, (int, float)) else None
            css = "" if not delta else (" class=up" if delta > 0 else " class=down")
            rows.append((esc(entry["agent"]), esc(name), fmt(value), fmt(theirs),
                         f"<span{css}>{'+' if delta and delta > 0 else ''}{fmt(delta)}</span>"))
    if not rows:
        return ""
    return "<h2>Key metrics, B against A</h2>" + table(("agent", "metric", "A", "B", "B − A"), rows, "metrics")
