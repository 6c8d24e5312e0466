"""The viewer's HTTP server, on the project's server stack (`BaseServer`: Starlette on uvicorn, loopback bind).

HTML pages for people, the same data as JSON under /api for scripts and tests. Queries read files, so they run in
a worker thread, one at a time: a second browser tab waits rather than doubling the memory of a scan.
"""

import threading
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from nemo_gym.config.servers import ServerSpec
from nemo_gym.server.base import BaseServer, error_response, json_response
from nemo_gym.viewer.compare import compare_runs
from nemo_gym.viewer.errors import NotFound, ViewerError
from nemo_gym.safe_html import Html, el
from nemo_gym.viewer.render_common import asset, layout, runs_subtitle
from nemo_gym.viewer.views import (
    RowQuery, ServerUrls, Viewer, compare_body, compare_task_body, overview_body, query_rows, rollout_body,
    rows_body, task_body, task_summaries,
)
from nemo_gym.viewer.transcript import transcript

STATIC = {"viewer.css": "text/css", "viewer.js": "text/javascript"}


class ViewerServer(BaseServer):
    def __init__(self, viewer: Viewer) -> None:
        super().__init__(ServerSpec("ng_view", "viewer", "viewer"))
        self.viewer = viewer
        self.urls = ServerUrls()
        self._lock = threading.Lock()

    def _nav(self, current: str) -> list[tuple[str, str, bool]]:
        nav = [("/", "Overview", current == "overview"), ("/rows?run=a", "Rollouts", current == "rows")]
        if self.viewer.comparing:
            nav += [("/rows?run=b", "Rollouts B", current == "rows_b"), ("/compare", "Compare", current == "compare")]
        return nav

    def _subtitle(self) -> Html:
        return runs_subtitle({label: index.input_glob for label, index in self.viewer.runs.items()})

    async def _call(self, work: Callable[[], Any]) -> Any:
        def locked() -> Any:
            with self._lock:
                return work()
        return await run_in_threadpool(locked)

    def _page(self, title: str, current: str, work: Callable[[Request], Html]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                body = await self._call(lambda: work(request))
                status = 200
            except NotFound as exc:
                body, status = el("p", str(exc), class_="error"), 404
            except ViewerError as exc:
                body, status = el("p", str(exc), class_="error"), 400
            return HTMLResponse(layout(title, body, self._nav(current), self._subtitle()), status_code=status)
        return endpoint

    def _api(self, work: Callable[[Request], Any], locked: bool = True) -> Callable[[Request], Any]:
        """`locked=False` for work that reads no index file (it may wait without holding up other requests)."""
        async def endpoint(request: Request) -> Response:
            try:
                result = (await self._call(lambda: work(request)) if locked
                          else await run_in_threadpool(lambda: work(request)))
                return json_response(result)
            except NotFound as exc:
                return error_response(404, "not_found", str(exc))
            except ViewerError as exc:
                return error_response(400, "bad_request", str(exc))
        return endpoint

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("not found", status_code=404)
        return Response(asset(name), media_type=STATIC[name], headers={"cache-control": "no-cache"})

    def routes(self) -> list[Route]:
        v, urls = self.viewer, self.urls

        def p(request: Request, name: str) -> Any:
            return request.path_params[name]

        def rollout_param(request: Request) -> int | None:
            raw = request.query_params.get("rollout")
            if raw is None or raw == "":
                return None
            if not raw.isdigit():
                raise ViewerError(f"parameter rollout must be an integer, got {raw!r}")
            return int(raw)

        pages = [
            ("/", "Overview", "overview", lambda r: overview_body(v, urls)),
            ("/rows", "Rollouts", "rows",
             lambda r: rows_body(v, RowQuery.parse(r.query_params), urls)),
            ("/task/{run}/{task:int}", "Task", "rows", lambda r: task_body(v, p(r, "run"), p(r, "task"), urls)),
            ("/rollout/{run}/{task:int}/{rollout:int}", "Transcript", "rows",
             lambda r: rollout_body(v, p(r, "run"), p(r, "task"), p(r, "rollout"), urls)),
            ("/compare", "Compare", "compare", lambda r: compare_body(v, r.query_params)),
            ("/compare/{task:int}", "Compare task", "compare",
             lambda r: compare_task_body(v, p(r, "task"), rollout_param(r))),
        ]
        apis = [
            ("/api/rows", self._api_rows),
            ("/api/task/{run}/{task:int}", lambda r: task_summaries(v.run(p(r, "run")), p(r, "task"))),
            ("/api/rollout/{run}/{task:int}/{rollout:int}", self._api_rollout),
            ("/api/compare", self._api_compare),
        ]
        routes = [Route(path, self._page(title, current, work), methods=["GET"])
                  for path, title, current, work in pages]
        routes += [Route(path, self._api(work), methods=["GET"]) for path, work in apis]
        # The overview waits while the background phase computes it, so it takes no lock: the table keeps answering.
        routes.append(Route("/api/overview", self._api(lambda r: {label: {"meta": i.meta, **i.overview()}
                                                                  for label, i in v.runs.items()}, locked=False),
                            methods=["GET"]))
        routes.append(Route("/static/{name}", self._static, methods=["GET"]))
        return routes

    def _api_rows(self, request: Request) -> dict[str, Any]:
        query = RowQuery.parse(request.query_params)
        summaries, page = query_rows(self.viewer, query)
        return {"rows": summaries, "total": page.total, "exact": page.exact, "offset": page.offset,
                "notes": page.notes}

    def _api_rollout(self, request: Request) -> dict[str, Any]:
        run, task, rollout = (request.path_params[k] for k in ("run", "task", "rollout"))
        index = self.viewer.run(run)
        position = index.find(task, rollout)
        t = transcript(index.row(position), index.is_failure(position))
        return {"failed": t.failed, "fields": t.fields, "usage": t.usage, "notes": t.notes,
                "items": [vars(item) for item in t.items]}

    def _api_compare(self, request: Request) -> dict[str, Any]:
        if not self.viewer.comparing:
            raise ViewerError("compare mode needs a second run: start ng_view with +compare_glob=...")
        q = request.query_params
        offset = int(q.get("offset") or 0) if (q.get("offset") or "0").isdigit() else -1
        if offset < 0:
            raise ViewerError("offset must be a non-negative integer")
        c = compare_runs(self.viewer.runs["a"], self.viewer.runs["b"], q.get("direction") or "all",
                         q.get("order") or "task", offset, 50)
        return {"changed": [{**vars(t), "delta": t.delta} for t in c.changed], "total_changed": c.total_changed,
                "worse": c.worse, "better": c.better, "common": c.common, "only_a": c.only_a, "only_b": c.only_b}
