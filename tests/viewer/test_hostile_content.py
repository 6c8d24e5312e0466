"""Hostile rollouts in a real browser: every page of ng_view, its export and the run report (ng_aggregate_rollouts)
open a run whose rows carry script tags, event attributes, `javascript:` URLs, broken UTF-8 and 1 MB lines in every
field they show (tests/viewer/hostile.py).

Nothing executes: the test watches for any dialog, for any request to a loopback trap of its own that the payloads
call when they run or load, and for any request off the page's own origin. The pages stay usable: the hostile text
is shown as text, each page keeps its structure (rows, transcript items), its own script still runs (the fold
toggle), and a 1 MB line folds and wraps instead of widening the page.
"""

from pathlib import Path
from typing import Any
from urllib.parse import quote

from playwright.sync_api import Page, expect

from nemo_gym.server.supervisor import free_port
from tests.collection.util import run_cli
from tests.viewer.browser import chromium_page
from tests.viewer.hostile import HostileRun, payload, running_trap, write_hostile_run
from tests.viewer.viewer_process import run_view, running_viewer

WIDTH = 1300


class Watch:
    """What a page did that it must not: dialogs opened, requests sent off its own origin."""

    def __init__(self, page: Page, origin: str) -> None:
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        page.on("dialog", self._dialog)
        page.on("request", lambda request: None if request.url.startswith(origin) else self.foreign.append(request.url))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


def _check(page: Page, watch: Watch, path: str) -> None:
    """No dialog opened while the page loaded (one blocks the page until it is answered, so any is seen by now); the
    page has its header, no element that came from a row, and its own script still works."""
    assert watch.dialogs == [], f"{path} ran a row's code: {watch.dialogs}"
    expect(page.locator("header .brand")).to_have_text("ng_view")
    assert page.locator("[id^='js-'], a[href^='javascript:' i], iframe").count() == 0, path
    toggle = page.locator("#toggle-folds")
    toggle.click()
    expect(toggle).to_have_text("fold all")
    assert page.locator("details.fold:not([open])").count() == 0, path  # viewer.js unfolded every long text
    # Long words and 1 MB lines wrap, long names are cut: the page needs no horizontal scrolling.
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH, path


def _viewer_pages(run: HostileRun, trap: str) -> list[tuple[str, int | None]]:
    """(path, transcript items expected or None) for every page of the viewer."""
    rows = [(task, rollout) for task in run.tasks for rollout in (0, 1) if (task, rollout) != (3, 1)]
    pages: list[tuple[str, int | None]] = [
        ("/", None), ("/rows?run=a&size=50", None), ("/rows?run=b", None),
        ("/rows?" + f"run=a&failure={quote(run.failure_class)}", None),
        ("/rows?" + f"run=a&q={quote(payload('query', trap))}", None),
        ("/rows?" + f"run=a&page={quote(payload('page_parameter', trap))}", None),  # an error page repeats it
        (f"/rows?run={quote(payload('run_parameter', trap))}", None),
        ("/compare", None), ("/rollout/a/3/1", 0),
    ]
    pages += [(f"/task/a/{task}", None) for task in run.tasks]
    pages += [(f"/compare/{task}", None) for task in run.tasks]
    pages += [(f"/rollout/a/{task}/{rollout}", run.items_per_row) for task, rollout in rows]
    return pages


def test_viewer_export_and_report_show_hostile_rows_as_text(tmp_path: Path) -> None:
    with running_trap() as trap:
        run_a = write_hostile_run(tmp_path / "a", trap.url)
        run_b = write_hostile_run(tmp_path / "b", trap.url, all_correct=True)
        args = [f"+input_glob={run_a.rollouts}", f"+compare_glob={run_b.rollouts}", f"+index_dir={tmp_path / 'index'}"]
        with running_viewer(args, tmp_path) as url, chromium_page(width=WIDTH) as page:
            page.set_default_timeout(30000)
            watch = Watch(page, url)
            for path, items in _viewer_pages(run_a, trap.url):
                page.goto(url + path)
                _check(page, watch, path)
                if items is not None:
                    expect(page.locator(".items > .item")).to_have_count(items)
            # Shown as the text it is, in full: a tool name, a failure class, the agent, the broken bytes.
            page.goto(url + "/rollout/a/2/0")
            expect(page.locator(".tool-name")).to_have_text(payload("tool_name", trap.url) + "\ufffd" * 3 + "(")
            page.goto(url + "/rollout/a/2/1")
            expect(page.locator(".tool-name")).to_have_text(payload("tool_name", trap.url) + "\ufffd")
            page.goto(url + "/rows?run=a&size=50")
            expect(page.locator("table.rows tbody tr")).to_have_count(run_a.rows + 1)
            expect(page.locator("table.rows .failed")).to_have_text("failed: " + run_a.failure_class)
            page.goto(url + "/")
            expect(page.locator("#run-a section.agent h3")).to_have_text(run_a.agent)
            assert (watch.dialogs, watch.foreign) == ([], [])

        export = tmp_path / "export.html"
        result = run_view(args + [f"+export={export}", "+export_sample=24"], tmp_path)
        assert result.returncode == 0, result.stderr
        report_run = write_hostile_run(tmp_path / "c", trap.url, broken_utf8=False)
        merged = tmp_path / "merged" / "rollouts.jsonl"
        result = run_cli("aggregate", [f"+input_glob={report_run.rollouts}", f"+output_jsonl_fpath={merged}",
                                       f"+head_server.port={free_port()}"], tmp_path)
        assert result.returncode == 1 and merged.with_name("rollouts_report.html").is_file(), result.stderr
        with chromium_page(width=WIDTH) as page:
            watch = Watch(page, "file://")
            page.goto(export.as_uri())
            _check(page, watch, "the export")
            expect(page.locator("article.transcript")).to_have_count(2 * (run_a.rows + 1))
            page.goto(merged.with_name("rollouts_report.html").as_uri())
            expect(page.locator("section h2")).to_have_text(report_run.agent)
            expect(page.locator("section table").nth(2)).to_contain_text(report_run.failure_class)
            assert page.locator("[id^='js-'], a[href^='javascript:' i], iframe").count() == 0
            assert (watch.dialogs, watch.foreign) == ([], [])
        assert trap.hits == []
