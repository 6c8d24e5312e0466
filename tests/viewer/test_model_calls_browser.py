"""The viewer's overview in a real browser shows each endpoint's model calls from the rows' per-call records:
latency p50/p95/p99 (within the 1% the metrics' buckets allow), output tokens per second, 429s and retries."""

from pathlib import Path

import orjson
from playwright.sync_api import expect

from nemo_gym.metrics.report import MODEL_CALL_COLUMNS
from tests.viewer.browser import chromium_page
from tests.viewer.synthetic import rollout_row
from tests.viewer.viewer_process import running_viewer

FAST, SLOW = "https://fast.example.com/v1", "http://10.0.0.7:8000/v1"


def _call(endpoint: str, started_at: float, latency_s: float, limited: int = 0) -> dict[str, object]:
    return {"endpoint": endpoint, "model": "m", "started_at": started_at, "latency_s": latency_s, "wait_s": 0.0,
            "attempts": 1 + limited, "rate_limited": limited, "failure_class": "rate_limited" if limited else None,
            "input_tokens": 20, "output_tokens": 50, "cached_tokens": None, "reasoning_tokens": None}


def _write_run(path: Path) -> None:
    """100 rollouts, each one call to FAST (latencies 0.01 s ... 1.00 s, one a second); every tenth also one call to
    SLOW (2 s), three of which met a 429."""
    with open(path, "wb") as out:
        for i in range(1, 101):
            calls = [_call(FAST, 1000.0 + i, 0.01 * i)]
            if i % 10 == 0:
                calls.append(_call(SLOW, 1000.0 + i, 2.0, limited=1 if i <= 30 else 0))
            out.write(orjson.dumps({**rollout_row(i, 0), "_ng_model_calls": calls}) + b"\n")


def _close(cell: str, expected: float) -> bool:
    return abs(float(cell) - expected) <= 0.01 * expected


def test_the_overview_shows_model_calls_per_endpoint(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    _write_run(run)
    args = [f"+input_glob={run}", f"+index_dir={tmp_path / 'index'}"]
    with running_viewer(args, tmp_path) as url, chromium_page() as page:
        page.set_default_timeout(15000)
        page.goto(url + "/")
        table = page.locator("#run-a table.model-calls")
        expect(table.locator("tbody tr")).to_have_count(2)
        headers = table.locator("thead th").all_inner_texts()
        cells = [row.locator("td").all_inner_texts() for row in table.locator("tbody tr").all()]
    assert headers == ["endpoint", *(heading for heading, _ in MODEL_CALL_COLUMNS)]
    by_endpoint = {row[0]: dict(zip(headers[1:], row[1:])) for row in cells}
    fast, slow = by_endpoint[FAST], by_endpoint[SLOW]
    assert (fast["calls"], fast["429s"], fast["retries"]) == ("100", "0", "0")
    assert _close(fast["latency p50 s"], 0.50) and _close(fast["p95 s"], 0.95) and _close(fast["p99 s"], 0.99)
    # 100 calls of 50 output tokens, from the first start (1001 s) to the last end (1100 s + 1 s): 50 a second.
    assert _close(fast["output tokens/s"], 50.0)
    assert (slow["calls"], slow["429s"], slow["retries"]) == ("10", "3", "3")
    assert _close(slow["latency p50 s"], 2.0) and _close(slow["p99 s"], 2.0)
