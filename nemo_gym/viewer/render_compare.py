"""Compare mode: the tasks whose reward changed between run A and run B, and one task's transcripts side by side."""

from typing import Any

from nemo_gym.viewer.compare import Comparison
from nemo_gym.viewer.render_common import esc, fmt, query_url, table


def _delta(value: float) -> str:
    css = "up" if value > 0 else "down" if value < 0 else ""
    return f'<span class="{css}">{"+" if value > 0 else ""}{fmt(value)}</span>'


def changed_tasks(comparison: Comparison, params: dict[str, Any], page: int, limit: int) -> str:
    c = comparison
    summary = (f'<p class="facts"><b>{c.total_changed:,}</b> of {c.common:,} common tasks changed mean reward: '
               f'<span class="down">{c.worse:,} worse</span>, <span class="up">{c.better:,} better</span>'
               f"; {c.only_a:,} tasks only in A, {c.only_b:,} only in B</p>")
    form = ('<form class="filters" method="get" action="/compare">'
            '<select name="direction" class="autosubmit">'
            + "".join(f'<option value="{d}"{" selected" if params.get("direction") == d else ""}>{d}</option>'
                      for d in ("all", "worse", "better"))
            + '</select><select name="order" class="autosubmit">'
            + "".join(f'<option value="{o}"{" selected" if params.get("order") == o else ""}>order by {o}</option>'
                      for o in ("task", "delta"))
            + '</select><button type="submit">apply</button></form>')
    rows = [(f'<a class="changed" href="/compare/{t.task}">{t.task}</a>', fmt(t.mean_a), fmt(t.mean_b),
             _delta(t.mean_b - t.mean_a) if t.mean_a == t.mean_a and t.mean_b == t.mean_b else "n/a",
             f"{t.rollouts_a} / {t.rollouts_b}") for t in c.changed]
    links = []
    if page > 1:
        previous = query_url("/compare", {**params, "page": page - 1})
        links.append(f'<a rel="prev" href="{esc(previous)}">← previous</a>')
    if page * limit < c.total_changed:
        links.append(f'<a rel="next" href="{esc(query_url("/compare", {**params, "page": page + 1}))}">next →</a>')
    return (f"<h2>Tasks whose reward changed</h2>{summary}{form}"
            + table(("task", "mean reward A", "mean reward B", "B − A", "rollouts A / B"), rows, "rows changed")
            + f'<div class="pager">{" ".join(links)}</div>')


def side_by_side(task: int, left: str, right: str, picker: str) -> str:
    return (f"<h2>Task {task}: run A and run B</h2>{picker}"
            f'<div class="side-by-side"><div class="side">{left}</div><div class="side">{right}</div></div>')
