"""The viewer in a real browser over two real collected runs: overview, filter to reward 0, open a transcript and
see the tool call, switch to compare mode and see a changed task side by side."""

from pathlib import Path

from playwright.sync_api import expect

from tests.viewer.browser import chromium_page
from tests.viewer.collected import REPEATS, TOKYO, CollectedRuns
from tests.viewer.viewer_process import running_viewer


def test_browse_filter_read_and_compare_in_a_browser(collected_runs: CollectedRuns, tmp_path: Path) -> None:
    args = [f"+input_glob={collected_runs.run_a}", f"+compare_glob={collected_runs.run_b}",
            f"+index_dir={tmp_path / 'index'}"]
    with running_viewer(args, tmp_path) as url, chromium_page() as page:
        page.set_default_timeout(15000)
        page.goto(url + "/")
        expect(page.locator("#run-a h2")).to_contain_text("Run A")
        expect(page.locator("#run-a table.metrics").first).to_contain_text("mean/reward")
        expect(page.locator("#run-a svg.pass-at-k")).to_have_count(1)
        expect(page.locator("#run-a table.failures")).to_contain_text("http_4xx")

        # The rollout table, filtered to reward 0: only run A's Tokyo rollouts are left.
        page.get_by_role("link", name="Rollouts", exact=True).click()
        expect(page.locator("table.rows tbody tr")).to_have_count(16)
        page.fill("input[name=reward_max]", "0")
        page.get_by_role("button", name="apply").click()
        assert "reward_max=0" in page.url
        expect(page.locator("input[name=reward_max]")).to_have_value("0")  # the form shows the filter in force
        rows = page.locator("table.rows tbody tr")
        expect(rows).to_have_count(REPEATS)
        expect(page.locator("table.rows .reward.zero")).to_have_count(REPEATS)
        expect(rows.first).to_contain_text("Tokyo")
        expect(page.locator(".pager .count").first).to_have_text(f"rows 1–{REPEATS} of {REPEATS}")

        # A transcript: the model's tool call with its (wrong) argument, the tool's result and the reward.
        rows.first.locator("a.open").click()
        call = page.locator(".item.tool-call")
        expect(call).to_have_count(1)
        expect(call.locator(".tool-name")).to_have_text("get_weather")
        expect(call.locator("pre")).to_contain_text('"city": "Kyoto"')
        expect(page.locator(".item.tool-result")).to_contain_text("cloudy")
        expect(page.locator(".item.reasoning")).to_contain_text("weather in Tokyo")
        expect(page.locator("table.kv").first).to_contain_text("expected_city")

        # Compare mode: the changed tasks, then one of them with both transcripts side by side.
        page.get_by_role("link", name="Compare", exact=True).click()
        expect(page.locator(".facts")).to_contain_text("2 of 8 common tasks changed")
        changed = page.locator("a.changed")
        expect(changed).to_have_text(["1", "4"])
        changed.first.click()
        assert page.url.endswith(f"/compare/{TOKYO}")
        sides = page.locator(".side-by-side .side")
        expect(sides).to_have_count(2)
        expect(sides.nth(0).locator("h3")).to_have_text("Run A: reward 0")
        expect(sides.nth(1).locator("h3")).to_have_text("Run B: reward 1")
        expect(sides.nth(0).locator(".item.tool-call pre")).to_contain_text('"Kyoto"')
        expect(sides.nth(1).locator(".item.tool-call pre")).to_contain_text('"Tokyo"')
