"""Compare mode: the tasks whose reward changed between run A and run B, and one task's transcripts side by side."""

from typing import Any

from nemo_gym.safe_html import Child, Html, el, fragment, join, table
from nemo_gym.viewer.compare import Comparison
from nemo_gym.viewer.render_common import fmt, query_url


def _delta(value: float) -> Html:
    css = "up" if value > 0 else "down" if value < 0 else ""
    return el("span", f"{'+' if value > 0 else ''}{fmt(value)}", class_=css)


def changed_tasks(comparison: Comparison, params: dict[str, Any], page: int, limit: int) -> Html:
    c = comparison
    summary = el("p", el("b", f"{c.total_changed:,}"), f" of {c.common:,} common tasks changed mean reward: ",
                 el("span", f"{c.worse:,} worse", class_="down"), ", ",
                 el("span", f"{c.better:,} better", class_="up"),
                 f"; {c.only_a:,} tasks only in A, {c.only_b:,} only in B", class_="facts")
    directions = [el("option", d, value=d, selected=params.get("direction") == d) for d in ("all", "worse", "better")]
    orders = [el("option", f"order by {o}", value=o, selected=params.get("order") == o) for o in ("task", "delta")]
    form = el("form", el("select", directions, name="direction", class_="autosubmit"),
              el("select", orders, name="order", class_="autosubmit"), el("button", "apply", type="submit"),
              class_="filters", method="get", action="/compare")
    rows = [(el("a", str(t.task), class_="changed", href=f"/compare/{t.task}"), fmt(t.mean_a), fmt(t.mean_b),
             _delta(t.mean_b - t.mean_a) if t.mean_a == t.mean_a and t.mean_b == t.mean_b else "n/a",
             f"{t.rollouts_a} / {t.rollouts_b}") for t in c.changed]
    links = []
    if page > 1:
        links.append(el("a", "← previous", rel="prev", href=query_url("/compare", {**params, "page": page - 1})))
    if page * limit < c.total_changed:
        links.append(el("a", "next →", rel="next", href=query_url("/compare", {**params, "page": page + 1})))
    headers = ("task", "mean reward A", "mean reward B", "B − A", "rollouts A / B")
    return fragment(el("h2", "Tasks whose reward changed"), summary, form, table(headers, rows, "rows changed"),
                    el("div", join(" ", links), class_="pager"))


def side_by_side(task: int, left: Child, right: Child, picker: Child) -> Html:
    return fragment(el("h2", f"Task {task}: run A and run B"), picker,
                    el("div", el("div", left, class_="side"), el("div", right, class_="side"), class_="side-by-side"))
