"""The rollout table (filter form, sortable columns, pages) and the task view (all rollouts of one task side by
side)."""

from typing import Any

from nemo_gym.pricing import format_usd
from nemo_gym.safe_html import Html, el, fragment, join, table
from nemo_gym.viewer.query import FAILURE_ANY, FAILURE_NONE, SORTS, Page
from nemo_gym.viewer.render_common import fmt, fold, link, query_url

PAGE_SIZES = (25, 50, 100, 200)


def reward_cell(summary: dict[str, Any]) -> Html:
    if summary["failure_class"]:
        return el("span", f"failed: {summary['failure_class']}", class_="failed")
    reward = summary["reward"]
    css = "zero" if reward == 0 else ("full" if reward is not None and reward >= 1 else "partial")
    return el("span", fmt(reward), class_=f"reward {css}")


def _select(name: str, options: list[tuple[str, str]], current: str | None) -> Html:
    opts = [el("option", label, value=v, selected=v == (current or "")) for v, label in options]
    return el("select", opts, name=name, class_="autosubmit")


def filter_form(params: dict[str, Any], agents: list[str], failure_classes: list[str], runs: list[str]) -> Html:
    failure_options = [("", "all rows"), (FAILURE_NONE, "succeeded"), (FAILURE_ANY, "any failure")]
    failure_options += [(cls, f"failed: {cls}") for cls in failure_classes if cls]
    run = (_select("run", [(r, f"run {r.upper()}") for r in runs], params.get("run")) if len(runs) > 1
           else el("input", type="hidden", name="run", value=runs[0]))
    sort = _select("sort", [(s, f"sort: {s}") for s in SORTS], params.get("sort"))
    order = _select("order", [("asc", "ascending"), ("desc", "descending")], params.get("order"))
    size = _select("size", [(str(n), f"{n} per page") for n in PAGE_SIZES], str(params.get("size") or 50))

    def box(name: str, label: str, width: str = "6em", kind: str = "text") -> Html:
        value = params.get(name)
        shown = "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
        return el("label", f"{label} ", el("input", type=kind, name=name, value=shown, style=f"width:{width}"))

    return el("form", run, _select("agent", [("", "all agents")] + [(a, a) for a in agents], params.get("agent")),
              box("task", "task"), box("reward_min", "reward ≥"), box("reward_max", "reward ≤"),
              _select("failure", failure_options, params.get("failure")),
              box("q", "text in prompt/answer", "14em", "search"), sort, order, size,
              el("button", "apply", type="submit"), " ",
              el("a", "clear", href=query_url("/rows", {"run": params.get("run") or "a"})),
              class_="filters", method="get", action="/rows")


def rows_table(summaries: list[dict[str, Any]], urls: Any) -> Html:
    rows = []
    for s in summaries:
        rows.append((
            link(str(s["task"]), urls.task(s["run"], s["task"])),
            el("a", str(s["rollout"]), class_="open", href=urls.rollout(s["run"], s["task"], s["rollout"])),
            s["agent"], reward_cell(s), s["extracted_answer"] or "", fmt(s["output_tokens"]),
            format_usd(s["cost_usd"]), fmt(s["tool_calls"]), f"{s['bytes']:,}",
            el("span", s["prompt"], class_="excerpt"), el("span", s["answer"], class_="excerpt"),
        ))
    return table(("task", "rollout", "agent", "reward", "extracted", "out tokens", "cost", "tool calls", "bytes",
                  "prompt", "answer"), rows, "rows")


def pager(page: Page, params: dict[str, Any]) -> Html:
    number = page.offset // page.limit + 1
    last = max(1, -(-page.total // page.limit))
    shown = (f"rows {page.offset + 1:,}–{page.offset + len(page.positions):,} of "
             f"{'' if page.exact else 'at least '}{page.total:,}" if page.positions else "no rows match")
    links = []
    if number > 1:
        links.append(el("a", "← previous", rel="prev", href=query_url("/rows", {**params, "page": number - 1})))
    if page.offset + page.limit < page.total or not page.exact:
        links.append(el("a", "next →", rel="next", href=query_url("/rows", {**params, "page": number + 1})))
    if page.exact and last > 1:
        links.append(el("span", f"page {number:,} of {last:,}", class_="muted"))
    notes = [el("p", n, class_="muted") for n in page.notes]
    return fragment(el("div", el("span", shown, class_="count"), " ", join(" ", links), class_="pager"), notes)


def task_view(run: str, task: int, summaries: list[dict[str, Any]], urls: Any, extras: dict[int, str]) -> Html:
    """Every rollout of one task as a column: reward, extracted answer, the final answer (folded when long)."""
    cards = []
    for s in summaries:
        cards.append(el(
            "div", el("h4", el("a", f"rollout {s['rollout']}", href=urls.rollout(run, task, s["rollout"]))),
            el("p", reward_cell(s)), el("p", "extracted answer: ", el("code", s["extracted_answer"] or "—")),
            el("p", f"{fmt(s['output_tokens'])} output tokens, {s['tool_calls']} tool calls", class_="muted"),
            fold(extras.get(s["rollout"], "")), class_="card"))
    prompt = summaries[0]["prompt"] if summaries else ""
    return fragment(el("h2", f"Task {task} of run {run.upper()} ({len(summaries)} rollouts)"),
                    el("p", el("b", "prompt:"), " ", prompt, class_="prompt"), el("div", cards, class_="cards"))
