"""Regenerate the screenshots of docs/viewer.md from two real collected runs.

    .venv/bin/python scripts/viewer_screenshots.py [--out docs/img]

Collects the viewer tests' two runs (the real ng_run stack: simple_agent, the weather environment, vllm_model in
front of tests/viewer/apps/weather_chat.py, and the real ng_collect_rollouts), serves them with ng_view and
photographs the overview, the rollout table filtered to reward 0, a transcript and a compared task with Debian's
chromium (playwright drives it). Everything runs in a temporary folder on loopback.
"""

import argparse
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.viewer.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.viewer.collected import TOKYO, collect_runs  # noqa: E402
from tests.viewer.viewer_process import running_viewer  # noqa: E402

SHOTS = {
    "viewer_overview.png": ("/", 1300, 1050),
    "viewer_rollouts.png": ("/rows?run=a&reward_max=0", 1300, 520),
    "viewer_transcript.png": (f"/rollout/a/{TOKYO}/0", 1300, 900),
    "viewer_compare.png": (f"/compare/{TOKYO}", 1300, 900),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ng_view_shots_") as tmp:
        work = Path(tmp)
        runs = collect_runs(work)
        view_args = [f"+input_glob={runs.run_a}", f"+compare_glob={runs.run_b}", f"+index_dir={work / 'index'}"]
        with running_viewer(view_args, work) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                for name, (path, width, height) in SHOTS.items():
                    page = browser.new_page(viewport={"width": width, "height": height})
                    page.goto(url + path)
                    page.screenshot(path=str(args.out / name))
                    page.close()
                    print(f"wrote {args.out / name}", flush=True)
            finally:
                browser.close()


if __name__ == "__main__":
    main()
