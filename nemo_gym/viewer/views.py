"""The viewer's pages as functions of the opened runs and the request's parameters: the HTTP app serves them and
the export writes the same HTML into one file. Each returns the body of a page (the layout wraps it)."""

import math
from dataclasses import dataclass
from typing import Any, Mapping

from nemo_gym.viewer.compare import compare_runs
from nemo_gym.viewer.errors import NotFound, ViewerError
from nemo_gym.viewer.index import RunIndex
from nemo_gym.viewer.query import MAX_LIMIT, RowFilter, select
from nemo_gym.safe_html import Html, el, fragment, join
from nemo_gym.viewer.render_common import query_url
from nemo_gym.viewer.render_compare import changed_tasks, side_by_side
from nemo_gym.viewer.render_overview import key_metric_deltas, run_overview
from nemo_gym.viewer.render_rows import filter_form, pager, rows_table, task_view
from nemo_gym.viewer.render_transcript import rollout_nav, transcript_html
from nemo_gym.viewer.row_fields import answer_text
from nemo_gym.viewer.summary import row_summary
from nemo_gym.viewer.transcript import transcript

MAX_TASK_ROLLOUTS = 256  # rollouts shown in one task view


class ServerUrls:
    """Links between the viewer's pages."""

    def rollout(self, run: str, task: int, rollout: int) -> str:
        return f"/rollout/{run}/{task}/{rollout}"

    def task(self, run: str, task: int) -> str | None:
        return f"/task/{run}/{task}"

    def failures(self, run: str, failure_class: str) -> str | None:
        return query_url("/rows", {"run": run, "failure": failure_class})


@dataclass
class Viewer:
    runs: dict[str, RunIndex]  # "a", and "b" in compare mode

    def run(self, label: str) -> RunIndex:
        if label not in self.runs:
            raise NotFound(f"no run {label!r} (runs: {', '.join(self.runs)})")
        return self.runs[label]

    @property
    def comparing(self) -> bool:
        return "b" in self.runs


def _number(params: Mapping[str, str], name: str, kind: type, default: Any = None) -> Any:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ViewerError(f"parameter {name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ViewerError(f"parameter {name} must be finite, got {raw!r}")
    return value


@dataclass(frozen=True)
class RowQuery:
    run: str
    filt: RowFilter
    sort: str
    descending: bool
    page: int
    size: int

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> "RowQuery":
        size = _number(params, "size", int, 50)
        page = _number(params, "page", int, 1)
        if page < 1 or not 1 <= size <= MAX_LIMIT:
            raise ViewerError(f"page must be >= 1 and size within 1..{MAX_LIMIT}")
        filt = RowFilter(
            agent=params.get("agent") or None, task=_number(params, "task", int),
            reward_min=_number(params, "reward_min", float), reward_max=_number(params, "reward_max", float),
            failure=params.get("failure") or None, text=(params.get("q") or "").strip() or None)
        return cls(params.get("run") or "a", filt, params.get("sort") or "key", params.get("order") == "desc",
                   page, size)

    def params(self) -> dict[str, Any]:
        f = self.filt
        return {"run": self.run, "agent": f.agent, "task": f.task, "reward_min": f.reward_min,
                "reward_max": f.reward_max, "failure": f.failure, "q": f.text, "sort": self.sort,
                "order": "desc" if self.descending else "asc", "size": self.size}


def overview_body(viewer: Viewer, urls: Any) -> Html:
    body = fragment([run_overview(index, urls.failures) for index in viewer.runs.values()])
    if viewer.comparing:
        return fragment(key_metric_deltas(viewer.runs["a"], viewer.runs["b"]), el("div", body, class_="two-runs"))
    return body


def query_rows(viewer: Viewer, query: RowQuery) -> tuple[list[dict[str, Any]], Any]:
    index = viewer.run(query.run)
    page = select(index, query.filt, query.sort, query.descending, (query.page - 1) * query.size, query.size)
    return [row_summary(index, p) for p in page.positions], page


def rows_body(viewer: Viewer, query: RowQuery, urls: Any) -> Html:
    index = viewer.run(query.run)
    summaries, page = query_rows(viewer, query)
    params = query.params()
    return fragment(el("h2", f"Rollouts of run {query.run.upper()}"),
                    filter_form(params, index.agents, index.failure_classes, list(viewer.runs)),
                    pager(page, params), rows_table(summaries, urls), pager(page, params))


def task_summaries(index: RunIndex, task: int) -> list[dict[str, Any]]:
    first, count = index.task_span(task)
    return [row_summary(index, p) for p in range(first, first + min(count, MAX_TASK_ROLLOUTS))]


def task_body(viewer: Viewer, run: str, task: int, urls: Any) -> Html:
    index = viewer.run(run)
    summaries = task_summaries(index, task)
    answers = {s["rollout"]: answer_text(index.row(s["position"])) for s in summaries if not s["failure_class"]}
    return task_view(run, task, summaries, urls, answers)


def rollout_body(viewer: Viewer, run: str, task: int, rollout: int, urls: Any) -> Html:
    index = viewer.run(run)
    position = index.find(task, rollout)
    links: dict[str, Any] = {"task": urls.task(run, task)}
    for rel, other in (("prev", position - 1), ("next", position + 1)):
        if 0 <= other < index.rows.rows:
            task_of, rollout_of = int(index.rows.value("task", other)), int(index.rows.value("rollout", other))
            links[rel] = urls.rollout(run, task_of, rollout_of)
    s = row_summary(index, position)
    heading = [f"Run {run.upper()}, task {task}, rollout {rollout} ", el("span", f"({s['agent']})", class_="muted")]
    return fragment(rollout_nav(links),
                    transcript_html(transcript(index.row(position), index.is_failure(position)), heading))


def compare_body(viewer: Viewer, params: Mapping[str, str]) -> Html:
    if not viewer.comparing:
        raise ViewerError("compare mode needs a second run: start ng_view with +compare_glob=...")
    page = _number(params, "page", int, 1)
    if page < 1:
        raise ViewerError("page must be >= 1")
    direction, order = params.get("direction") or "all", params.get("order") or "task"
    comparison = compare_runs(viewer.runs["a"], viewer.runs["b"], direction, order, (page - 1) * 50, 50)
    return changed_tasks(comparison, {"direction": direction, "order": order}, page, 50)


def compare_task_body(viewer: Viewer, task: int, rollout: int | None) -> Html:
    """Both runs' rollouts of `task` with their rewards, and one rollout's transcripts side by side (by default the
    first rollout whose reward differs between the runs)."""
    if not viewer.comparing:
        raise ViewerError("compare mode needs a second run: start ng_view with +compare_glob=...")
    a, b = viewer.runs["a"], viewer.runs["b"]
    sides = {label: {s["rollout"]: s for s in _task_or_none(index, task)} for label, index in (("a", a), ("b", b))}
    if not sides["a"] and not sides["b"]:
        raise NotFound(f"neither run has task {task}")
    common = sorted(set(sides["a"]) & set(sides["b"]))
    if rollout is None:
        differing = [r for r in common if sides["a"][r]["reward"] != sides["b"][r]["reward"]]
        rollout = (differing or common or sorted(sides["a"]))[0]
    picker = join(" ", (
        el("a", f"rollout {r}: {_reward(sides['a'].get(r))} → {_reward(sides['b'].get(r))}",
           class_="current" if r == rollout else "", href=f"/compare/{task}?rollout={r}")
        for r in sorted(set(sides["a"]) | set(sides["b"]))))

    def side(label: str, index: RunIndex) -> Html:
        if rollout not in sides[label]:
            return el("p", f"run {label.upper()} has no rollout {rollout} of task {task}", class_="muted")
        position = sides[label][rollout]["position"]
        return transcript_html(transcript(index.row(position), index.is_failure(position)),
                               f"Run {label.upper()}: reward {_reward(sides[label][rollout])}")

    return side_by_side(task, side("a", a), side("b", b), el("p", picker, class_="picker"))


def _task_or_none(index: RunIndex, task: int) -> list[dict[str, Any]]:
    try:
        return task_summaries(index, task)
    except NotFound:
        return []


def _reward(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "—"
    if summary["failure_class"]:
        return f"failed ({summary['failure_class']})"
    return "n/a" if summary["reward"] is None else f"{summary['reward']:.4g}"
