"""ng_view over two real collected runs, through HTTP: pages, the JSON API, errors, loopback bind, the export and
the collection report's link to the viewer."""

import re
from pathlib import Path
from typing import Iterator

import httpx
import orjson
import psutil
import pytest

from nemo_gym.metrics.report import viewer_command
from tests.viewer.collected import AGENT, ATLANTIS, CAIRO, REPEATS, TOKYO, CollectedRuns
from tests.viewer.viewer_process import run_view, running_viewer


@pytest.fixture(scope="module")
def viewer(collected_runs: CollectedRuns, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("viewer_http")
    glob_a = str(collected_runs.run_a.parent / "run_a*.jsonl")  # also matches the run's sidecars
    with running_viewer([f"+input_glob={glob_a}", f"+compare_glob={collected_runs.run_b}",
                         f"+index_dir={work / 'index'}"], work) as url:
        yield url


def get(url: str, **params) -> httpx.Response:
    return httpx.get(url, params=params, trust_env=False, timeout=30)


def test_overview_shows_metrics_failures_and_manifest(viewer: str) -> None:
    page = get(f"{viewer}/")
    assert page.status_code == 200
    assert "mean/reward" in page.text and "95% interval" in page.text and 'class="pass-at-k"' in page.text
    assert 'class="histogram"' in page.text and "http_4xx" in page.text and "input_sha256" in page.text
    overview = get(f"{viewer}/api/overview").json()
    a = overview["a"]["agents"][0]
    assert a["agent"] == AGENT and a["environment_metrics"]  # read from the run's aggregate metrics file
    assert a["agent_metrics"]["num_rollouts"] == 7 * REPEATS and a["failures_by_class"] == {"http_4xx": REPEATS}
    assert a["agent_metrics"]["mean/reward"] == pytest.approx(6 / 7)
    assert overview["a"]["manifests"][0]["manifest"]["fingerprint"]["num_repeats"] == REPEATS


def test_rows_api_filters_and_sorts(viewer: str) -> None:
    zero = get(f"{viewer}/api/rows", reward_max="0").json()
    assert [(r["task"], r["reward"]) for r in zero["rows"]] == [(TOKYO, 0.0)] * REPEATS and zero["total"] == REPEATS
    zero_b = get(f"{viewer}/api/rows", run="b", reward_max="0").json()
    assert {r["task"] for r in zero_b["rows"]} == {CAIRO}
    failed = get(f"{viewer}/api/rows", failure="http_4xx").json()["rows"]
    assert {(r["task"], r["failure_class"], r["reward"]) for r in failed} == {(ATLANTIS, "http_4xx", None)}
    assert [r["task"] for r in get(f"{viewer}/api/rows", q="oslo").json()["rows"]] == [7] * REPEATS
    by_reward = get(f"{viewer}/api/rows", sort="reward", order="asc").json()["rows"]
    assert by_reward[0]["reward"] == 0.0 and by_reward[-1]["failure_class"] == "http_4xx"
    assert all(r["tool_calls"] == 1 and r["output_tokens"] > 0 for r in by_reward if r["reward"] is not None)
    page = get(f"{viewer}/rows", run="a", reward_max="0")
    assert page.status_code == 200 and page.text.count('class="open"') == REPEATS


def test_transcript_shows_tool_call_arguments_result_and_reasoning(viewer: str) -> None:
    page = get(f"{viewer}/rollout/a/{TOKYO}/0").text
    assert 'class="item tool-call"' in page and "get_weather" in page and "&quot;Kyoto&quot;" in page
    assert 'class="item tool-result"' in page and "cloudy" in page and 'class="item reasoning"' in page
    data = get(f"{viewer}/api/rollout/a/{TOKYO}/0").json()
    kinds = [item["kind"] for item in data["items"]]
    assert kinds == ["message", "message", "reasoning", "tool_call", "tool_result", "message"]
    assert data["fields"]["reward"] == 0.0 and data["usage"]["output_tokens"] > 0
    failure = get(f"{viewer}/api/rollout/a/{ATLANTIS}/1").json()
    assert failure["failed"] and failure["fields"]["failure_class"] == "http_4xx" and not failure["items"]


def test_task_and_compare_views(viewer: str) -> None:
    task = get(f"{viewer}/task/a/{TOKYO}").text
    assert task.count('class="card"') == REPEATS and "Tokyo" in task
    changed = get(f"{viewer}/api/compare").json()
    assert [(c["task"], c["delta"]) for c in changed["changed"]] == [(TOKYO, 1.0), (CAIRO, -1.0)]
    assert changed["common"] == 8 and changed["worse"] == 1 and changed["better"] == 1
    listing = get(f"{viewer}/compare").text
    assert f'href="/compare/{TOKYO}"' in listing and f'href="/compare/{CAIRO}"' in listing
    side = get(f"{viewer}/compare/{TOKYO}").text
    assert side.count('class="transcript"') == 2 and "Run A: reward 0" in side and "Run B: reward 1" in side


def test_bad_requests_and_missing_rows(viewer: str) -> None:
    bad = get(f"{viewer}/rows", reward_min="high")
    assert bad.status_code == 400 and "reward_min must be a number" in bad.text
    api = get(f"{viewer}/api/rows", sort="nonsense")
    assert api.status_code == 400 and "sort must be one of" in api.json()["error"]["message"]
    missing = get(f"{viewer}/rollout/a/{TOKYO}/99")
    assert missing.status_code == 404 and "no rollout 99 of task 1" in missing.text
    assert get(f"{viewer}/api/task/c/0").status_code == 404
    assert get(f"{viewer}/compare/99").status_code == 404


def test_the_server_binds_loopback_only(viewer: str) -> None:
    port = int(viewer.rsplit(":", 1)[1])
    listening = [c for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.laddr.port == port]
    assert listening and {c.laddr.ip for c in listening} == {"127.0.0.1"}


def test_export_writes_one_self_contained_file(collected_runs: CollectedRuns, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_view([f"+input_glob={collected_runs.run_a}", f"+compare_glob={collected_runs.run_b}",
                       f"+export={out}", "+export_sample=6", f"+index_dir={tmp_path / 'index'}"], tmp_path)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "mean/reward" in text and "Tasks whose reward changed" in text and "get_weather" in text
    assert text.count('class="transcript"') == 12 and "<style>" in text and "<script>" in text
    # Self-contained: nothing is fetched from anywhere.
    assert not re.search(r'(src|href)="(https?:)?//', text) and "/static/" not in text


def test_collection_report_links_to_the_viewer(collected_runs: CollectedRuns) -> None:
    report = collected_runs.run_a.with_name("run_a_report.html").read_text()
    assert f"ng_view +input_glob={collected_runs.run_a.resolve()}" in report
    quoted = "ng_view '+input_glob=/data/my runs/a.jsonl,/b.jsonl'"
    assert viewer_command(["/data/my runs/a.jsonl", "/b.jsonl"]) == quoted


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    result = run_view([f"+input_glob={tmp_path}/none*.jsonl", f"+index_dir={tmp_path}"], tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == f"error: no rollout files match '{tmp_path}/none*.jsonl'"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0}) + b"\n")
    result = run_view([f"+input_glob={bad}", f"+index_dir={tmp_path}"], tmp_path)
    assert result.returncode == 2 and f"{bad}:1: rollout row has no agent_ref.name" in result.stderr
    typo = run_view([f"+input_glob={bad}", "+compare_glog=x"], tmp_path)
    assert typo.returncode == 2 and "did you mean +compare_glob" in typo.stderr
