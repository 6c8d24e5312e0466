"""ng_view benchmark: time to first page and peak RSS of the viewer over a 10k-row and a 1M-row rollout file.

    .venv/bin/python -m benchmarks.perf.viewer [--sizes 10000 1000000]

Per size, a synthetic run (weather-style rows: a tool call, its result, an answer, token usage, 0/1 reward, written
in completion order: shuffled within windows of 64 rows, as a collector with 64 in flight writes them) goes to a
temporary folder, deleted afterwards. The real `python -m nemo_gym.cli.view` is started on it twice:
- cold: the first open, which builds the index; time to first page = process start to the first rollout-table page
  (`GET /rows`) answered; time to overview = process start to the overview's metrics (`GET /api/overview`), which a
  background phase computes after the index;
- warm: a second start reusing the index.
Then, on the warm server, each kind of request is timed once (overview, first page, a reward-sorted page, a deep
page, a reward filter, a text search that matches nothing and so reads every row, a transcript). Peak RSS is the
server's VmHWM read from /proc before it is stopped; its CPU seconds up to the first page are recorded too, a figure
that other load on a shared machine does not inflate. Results go to benchmarks/results/viewer.json with the ratio of
the largest size against the smallest.
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from benchmarks.perf.results import REPO_ROOT, load_average, recording
from nemo_gym.server.supervisor import free_port

WINDOW = 64
CITIES = ("Paris", "Tokyo", "New York", "Sydney", "Cairo", "Lima")
REQUESTS = {
    "overview": "/",
    "first_page": "/rows?run=a",
    "sorted_by_reward_desc": "/rows?run=a&sort=reward&order=desc",
    "deep_page": "/rows?run=a&page={deep_page}",
    "filter_reward_0": "/rows?run=a&reward_max=0&page=2",
    "text_search_no_match": "/rows?run=a&q=zzzz-no-such-text",
    "transcript": "/rollout/a/{mid_task}/1",
}


def _row(task: int, rollout: int, rng: random.Random) -> bytes:
    city = CITIES[task % len(CITIES)]
    asked = city if rng.random() < 0.7 else "Kyoto"
    return orjson.dumps({
        "_ng_task_index": task, "_ng_rollout_index": rollout,
        "responses_create_params": {"input": [{"role": "user", "content": f"Question {task}: weather in {city}?"}]},
        "expected_city": city, "agent_ref": {"name": "weather_agent"},
        "response": {"id": f"resp_{task}_{rollout}", "status": "completed", "output": [
            {"type": "function_call", "call_id": f"call_{task}_{rollout}", "name": "get_weather",
             "arguments": orjson.dumps({"city": asked}).decode()},
            {"type": "function_call_output", "call_id": f"call_{task}_{rollout}",
             "output": orjson.dumps({"city": asked, "weather": "light rain, 14 C"}).decode()},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": f"The weather in {asked} is light rain, 14 C."}]}],
            "usage": {"input_tokens": 60 + task % 17, "output_tokens": 20 + rng.randint(0, 200),
                      "total_tokens": 300}},
        "reward": float(asked == city),
    }, option=orjson.OPT_APPEND_NEWLINE)


def write_run(path: Path, rows: int, repeats: int = 4, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "wb", buffering=1 << 20) as out:
        for start in range(0, rows, WINDOW):
            keys = [divmod(i, repeats) for i in range(start, min(rows, start + WINDOW))]
            rng.shuffle(keys)
            for task, rollout in keys:
                out.write(_row(task, rollout, rng))


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)


def _cpu_s(pid: int) -> float:
    """CPU seconds the server used so far: unlike wall time, not inflated by other load on a shared machine."""
    times = psutil.Process(pid).cpu_times()
    return round(times.user + times.system, 2)


def _get(url: str) -> float:
    started = time.perf_counter()
    response = httpx.get(url, trust_env=False, timeout=600)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:500]}")
    return round(time.perf_counter() - started, 3)


def serve_and_measure(path: Path, index_dir: Path, rows: int, timed: bool) -> dict[str, Any]:
    """Start ng_view on `path`; seconds to the first rollout-table page, per-request seconds, peak RSS."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO_ROOT)) if p)}
    started = time.perf_counter()
    popen = subprocess.Popen([sys.executable, "-m", "nemo_gym.cli.view", f"+input_glob={path}", f"+port={port}",
                              f"+index_dir={index_dir}"], cwd=path.parent, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"ng_view exited: {popen.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{base}/rows?run=a", trust_env=False, timeout=600).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        figures: dict[str, Any] = {"time_to_first_page_s": round(time.perf_counter() - started, 3),
                                   "cpu_s_to_first_page": _cpu_s(popen.pid)}
        _get(f"{base}/api/overview")  # answers once the overview's metrics are in (a background phase)
        figures["time_to_overview_s"] = round(time.perf_counter() - started, 3)
        if timed:
            values = {"deep_page": rows // 50 // 2, "mid_task": rows // 4 // 2}
            figures["request_s"] = {name: _get(base + path_.format(**values)) for name, path_ in REQUESTS.items()}
        figures["peak_rss_mb"] = _peak_rss_mb(popen.pid)
        return figures
    finally:
        os.killpg(popen.pid, signal.SIGTERM)
        popen.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--quick", action="store_true", help="1,000 and 20,000 rows, results under quick/")
    args = parser.parse_args()
    sizes = [1_000, 20_000] if args.quick else args.sizes
    with recording("viewer", args.quick) as recorder:
        runs = []
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="ng_view_bench_") as tmp:
                path = Path(tmp) / f"rollouts_{size}.jsonl"
                started = time.perf_counter()
                write_run(path, size)
                mb = round(path.stat().st_size / 1e6, 1)
                print(f"{size} rows: wrote {mb} MB in {time.perf_counter() - started:.1f} s", flush=True)
                load = load_average()
                cold = serve_and_measure(path, Path(tmp) / "index", size, timed=False)
                warm = serve_and_measure(path, Path(tmp) / "index", size, timed=True)
                run = {"rows": size, "file_mb": mb, "cold": cold, "warm": warm, "load_average": load}
                print(orjson.dumps(run).decode(), flush=True)
                runs.append(run)
        small, large = runs[0], runs[-1]

        def ratio(phase: str, figure: str) -> float:
            return round(large[phase][figure] / small[phase][figure], 2)

        recorder.write({"rows": large["rows"] / small["rows"],
                        "cold_time_to_first_page": ratio("cold", "time_to_first_page_s"),
                        "cold_cpu_to_first_page": ratio("cold", "cpu_s_to_first_page"),
                        "warm_time_to_first_page": ratio("warm", "time_to_first_page_s"),
                        "cold_peak_rss": ratio("cold", "peak_rss_mb"), "warm_peak_rss": ratio("warm", "peak_rss_mb")},
                       {"runs": runs})


if __name__ == "__main__":
    main()
