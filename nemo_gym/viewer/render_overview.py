"""The run overview: per agent, the key metrics with their 95% interval, counts, pass@k, the reward histogram,
failures by class, the model calls per endpoint (latency percentiles, tokens/s, 429s, retries), every metric, and the
run's manifest. Two runs side by side in compare mode."""

from typing import Any, Callable

import orjson

from nemo_gym.metrics.report import COUNTS, histogram_svg, model_calls_table, pass_at_k_svg
from nemo_gym.pricing import format_usd
from nemo_gym.safe_html import Html, el, fragment, table
from nemo_gym.viewer.index import RunIndex
from nemo_gym.viewer.render_common import fmt, kv_table, link

FailureLink = Callable[[str, str], str | None]  # (run, failure class) -> href


def _interval(metrics: dict[str, Any], name: str) -> str:
    """'[low, high]' for a metric with a ci95 pair in the metrics (mean/reward has one)."""
    field = name.split("/", 1)[1] if "/" in name else name
    low, high = metrics.get(f"ci95_low/{field}"), metrics.get(f"ci95_high/{field}")
    if name.startswith("mean/") and low is not None and high is not None:
        return f"[{fmt(low)}, {fmt(high)}]"
    return ""


def _key_metrics(entry: dict[str, Any]) -> Html:
    metrics = entry["agent_metrics"]
    rows = [(name, el("b", fmt(value), class_="metric"), _interval(metrics, name))
            for name, value in entry["key_metrics"].items() if not name.startswith("ci95_")]
    return table(("key metric", "value", "95% interval"), rows, "metrics")


def _failures(entry: dict[str, Any], run: str, failure_link: FailureLink) -> Html:
    failures = entry["failures_by_class"]
    if not failures:
        return el("p", "no failed rollouts", class_="muted")
    rows = [(link(cls, failure_link(run, cls)), fmt(count))
            for cls, count in sorted(failures.items(), key=lambda kv: -kv[1])]
    return table(("failure class", "rollouts"), rows, "failures")


def agent_section(entry: dict[str, Any], run: str, failure_link: FailureLink) -> Html:
    metrics = entry["agent_metrics"]
    counts = {name: metrics[name] for name in COUNTS if name in metrics}
    pass_at_k = {int(k): (v if v is not None else float("nan")) for k, v in entry["pass_at_k"].items()}
    edges, counts_hist = entry["histogram"]
    source = ("library and environment metrics" if entry.get("environment_metrics")
              else "library metrics computed by the viewer")
    return el("section", el("h3", entry["agent"]), el("p", source, class_="muted"),
              el("div", _key_metrics(entry), kv_table(counts, ("count", "value")),
                 _failures(entry, run, failure_link), class_="tables"),
              model_calls_table(entry.get("model_calls") or []),
              el("div", pass_at_k_svg(pass_at_k), histogram_svg(edges, counts_hist), class_="charts"),
              el("details", el("summary", f"all metrics ({len(metrics)})"), kv_table(metrics, ("metric", "value"))),
              class_="agent")


def run_overview(index: RunIndex, failure_link: FailureLink) -> Html:
    meta = index.meta
    files = el("ul", [el("li", el("code", str(p))) for p in index.rollout_files], class_="files")
    duplicates = f", {meta['duplicates']:,} duplicate copies dropped" if meta["duplicates"] else ""
    facts = el("p", el("b", f"{meta['rows']:,}"), " rows (", el("b", f"{meta['failures']:,}"), " failed) over ",
               el("b", f"{meta['tasks']:,}"), f" tasks, agents: {', '.join(meta['agents']) or 'none'}{duplicates}",
               class_="facts")
    head = [el("h2", f"Run {index.label.upper()}: ", el("code", index.input_glob)), facts, files]
    job = index.overview_job
    if not job.ready:  # the rollout table works already; this page reloads itself until the metrics are in
        return el("section", head, el("meta", http_equiv="refresh", content="2"),
                  el("p", f"computing the metrics of this run: {job.rows_done:,} of {job.total_rows:,} rows read ...",
                     class_="muted"), class_="run", id=f"run-{index.label}")
    overview = index.overview()
    head.append(el("p", "cost of the rollouts: ", el("b", format_usd(overview["cost_usd"])), class_="facts"))
    agents = [agent_section(entry, index.label, failure_link) for entry in overview["agents"]]
    manifests = [el("details", el("summary", "manifest of ", el("code", m["file"])),
                    el("pre", orjson.dumps(m["manifest"], option=orjson.OPT_INDENT_2).decode()))
                 for m in overview["manifests"]] or [el("p", "no manifest next to these files", class_="muted")]
    return el("section", head, agents, el("h3", "Manifest"), manifests, class_="run", id=f"run-{index.label}")


def key_metric_deltas(a: RunIndex, b: RunIndex) -> Html:
    """Per agent present in both runs: each key metric of A, of B, and B - A (once both runs' metrics are in)."""
    if not (a.overview_job.ready and b.overview_job.ready):
        return fragment()
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
            css = None if not delta else ("up" if delta > 0 else "down")
            rows.append((entry["agent"], name, fmt(value), fmt(theirs),
                         el("span", f"{'+' if delta and delta > 0 else ''}{fmt(delta)}", class_=css)))
    if not rows:
        return fragment()
    return fragment(el("h2", "Key metrics, B against A"), table(("agent", "metric", "A", "B", "B − A"), rows,
                                                                 "metrics"))
