"""The rollout table (filter form, sortable columns, pages) and the task view (all rollouts of one task side by
side)."""

from typing import Any

from nemo_gym.viewer.query import FAILURE_ANY, FAILURE_NONE, SORTS, Page
from nemo_gym.viewer.render_common import esc, fmt, fold, query_url, table

PAGE_SIZES = (25, 50, 100, 200)


def reward_cell(summary: dict[str, Any]) -> str:
    if summary["failure_class"]:
        return f'<span class="failed">failed: {esc(summary["failure_class"])}</span>'
    reward = summary["reward"]
    css = "zero" if reward == 0 else ("full" if reward is not None and reward >= 1 else "partial")
    return f'<span class="reward {css}">{fmt(reward)}</span>'


def _select(name: str, options: list[tuple[str, str]], current: str | None) -> str:
    opts = "".join(f'<option value="{esc(v)}"{" selected" if v == (current or "") else ""}>{esc(label)}</option>'
                   for v, label in options)
    return f'<select name="{name}" class="autosubmit">{opts}</select>'


def filter_form(params: dict[str, Any], agents: list[str], failure_classes: list[str], runs: list[str]) -> str:
    failure_options = [("", "all rows"), (FAILURE_NONE, "succeeded"), (FAILURE_ANY, "any failure")]
    failure_options += [(cls, f"failed: {cls}") for cls in failure_classes if cls]
    run = _select("run", [(r, f"run {r.upper()}") for r in runs], params.get("run")) if len(runs) > 1 else (
        f'<input type="hidden" name="run" value="{esc(runs[0])}">')
    sort = _select("sort", [(s, f"sort: {s}") for s in SORTS], params.get("sort"))
    order = _select("order", [("asc", "ascending"), ("desc", "descending")], params.get("order"))
    size = _select("size", [(str(n), f"{n} per page") for n in PAGE_SIZES], str(params.get("size") or 50))

    def box(name: str, label: str, width: str = "6em", kind: str = "text") -> str:
        value = params.get(name)
        shown = "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
        return (f'<label>{label} <input type="{kind}" name="{name}" value="{esc(shown)}" '
                f'style="width:{width}"></label>')

    return (f'<form class="filters" method="get" action="/rows">{run}'
            f"{_select('agent', [('', 'all agents')] + [(a, a) for a in agents], params.get('agent'))}"
            f"{box('task', 'task')}{box('reward_min', 'reward ≥')}{box('reward_max', 'reward ≤')}"
            f"{_select('failure', failure_options, params.get('failure'))}"
            f"{box('q', 'text in prompt/answer', '14em', 'search')}{sort}{order}{size}"
            f'<button type="submit">apply</button> <a href="/rows?run={esc(params.get("run") or "a")}">clear</a>'
            f"</form>")


def rows_table(summaries: list[dict[str, Any]], urls: Any) -> str:
    rows = []
    for s in summaries:
        transcript = urls.rollout(s["run"], s["task"], s["rollout"])
        task = urls.task(s["run"], s["task"])
        rows.append((
            f'<a href="{esc(task)}">{s["task"]}</a>' if task else str(s["task"]),
            f'<a class="open" href="{esc(transcript)}">{s["rollout"]}</a>',
            esc(s["agent"]), reward_cell(s), esc(s["extracted_answer"] or ""), fmt(s["output_tokens"]),
            fmt(s["tool_calls"]), f"{s['bytes']:,}", f'<span class="excerpt">{esc(s["prompt"])}</span>',
            f'<span class="excerpt">{esc(s["answer"])}</span>',
        ))
    return table(("task", "rollout", "agent", "reward", "extracted", "out tokens", "tool calls", "bytes", "prompt",
                  "answer"), rows, "rows")


def pager(page: Page, params: dict[str, Any]) -> str:
    number = page.offset // page.limit + 1
    last = max(1, -(-page.total // page.limit))
    shown = (f"rows {page.offset + 1:,}–{page.offset + len(page.positions):,} of "
             f"{'' if page.exact else 'at least '}{page.total:,}" if page.positions else "no rows match")
    links = []
    if number > 1:
        links.append(f'<a rel="prev" href="{esc(query_url("/rows", {**params, "page": number - 1}))}">← previous</a>')
    if page.offset + page.limit < page.total or not page.exact:
        links.append(f'<a rel="next" href="{esc(query_url("/rows", {**params, "page": number + 1}))}">next →</a>')
    if page.exact and last > 1:
        links.append(f'<span class="muted">page {number:,} of {last:,}</span>')
    notes = "".join(f'<p class="muted">{esc(n)}</p>' for n in page.notes)
    return f'<div class="pager"><span class="count">{shown}</span> {" ".join(links)}</div>{notes}'


def task_view(run: str, task: int, summaries: list[dict[str, Any]], urls: Any, extras: dict[int, str]) -> str:
    """Every rollout of one task as a column: reward, extracted answer, the final answer (folded when long)."""
    cards = []
    for s in summaries:
        href = urls.rollout(run, task, s["rollout"])
        cards.append(
            f'<div class="card"><h4><a href="{esc(href)}">rollout {s["rollout"]}</a></h4>'
            f'<p>{reward_cell(s)}</p><p>extracted answer: <code>{esc(s["extracted_answer"] or "—")}</code></p>'
            f'<p class="muted">{fmt(s["output_tokens"])} output tokens, {s["tool_calls"]} tool calls</p>'
            f"{fold(extras.get(s['rollout'], ''))}</div>")
    prompt = summaries[0]["prompt"] if summaries else ""
    return (f"<h2>Task {task} of run {run.upper()} ({len(summaries)} rollouts)</h2>"
            f'<p class="prompt"><b>prompt:</b> {esc(prompt)}</p><div class="cards">{"".join(cards)}</div>')
