"""nemo_gym and NeMo Gym 0.4.0 side by side against a rate-limited hosted API: the loopback stub of
benchmarks/perf/hosted_api_stub.py (a request and a token budget per minute, 429 with Retry-After beyond them,
lognormal latencies with a median of about 1 s and a long tail).

    .venv/bin/python -m benchmarks.perf.hosted_api [--quick]

Both stacks serve the weather environment (`example_single_tool_call` + `simple_agent` + `vllm_model`, two model
calls per rollout) in front of the same stub, and each side's own `ng_collect_rollouts` runs the same rows at the
same ceiling of rollouts in flight. Ours runs twice: with the stub's limits configured on the model server
(max_requests_per_minute, max_tokens_per_minute: the documented way for a known quota), and without them (the rate
learned from 429s, the concurrency adaptive). Measured per run, from the stub's own counts and the output file:
- goodput: completed rollouts per second over the rate the stub allows, from the end of the first minute until 90%
  of the rollouts are done (the steady state: neither the first minute nor the drain at the end);
- 429s and endpoint requests per rollout, rollout attempts per rollout (ours, from its progress file), failed
  rollouts, time to the first rollout;
- a wrong model name (the stub renamed under a running stack): the time until each collector stops and the requests
  the stub saw meanwhile; ours also through ng_e2e_collect_rollouts, which checks before it starts any server.
Writes benchmarks/results/hosted_api.json.
"""

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchmarks.perf.harness import WEATHER_AGENT, WEATHER_CONFIG, _env, ng_run
from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.nemo_gym_reference import NG_PYTHON, _reference_env, reference_stack, write_rows
from benchmarks.perf.results import REPO_ROOT, load_average, recording
from nemo_gym.server.supervisor import free_port

STUB = REPO_ROOT / "benchmarks" / "perf" / "hosted_api_stub.py"
# What NeMo Gym's ng_run sends (benchmarks.perf.nemo_gym_reference): the stub answers to that name and key.
MODEL, KEY = "stub", "none"
LIMITED_AGENT = "limited_agent"
CALLS_PER_ROLLOUT = 2  # the weather task: a tool call, then the answer
MAX_OUTPUT_TOKENS = 100
STEADY_UNTIL = 0.9  # goodput is measured until this share of the rollouts is done
WRONG_MODEL_CAP_S = 300.0


def stub_settings(args: argparse.Namespace, port: int) -> dict[str, Any]:
    return {"entrypoint": str(STUB), "port": port, "model": MODEL, "api_key": KEY,
            "requests_per_minute": args.requests_per_minute, "tokens_per_minute": args.tokens_per_minute,
            "burst_s": 1.0, "latency_median_s": 1.0, "latency_sigma": 0.8, "time_scale": args.time_scale}


def stats(url: str) -> dict[str, int]:
    return httpx.get(f"{url.removesuffix('/v1')}/stats", timeout=10, trust_env=False).json()


def control(url: str, **changes: Any) -> None:
    httpx.post(f"{url.removesuffix('/v1')}/control", json=changes, timeout=10, trust_env=False).raise_for_status()


def _deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after}


class OutputWatch:
    """Samples how many lines the output file holds, every 0.25 s, from the collector's start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.monotonic()
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _count(self) -> int:
        try:
            return self.path.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def _watch(self) -> None:
        while not self._stop.wait(0.25):
            self.samples.append((time.monotonic() - self.started, self._count()))

    def __enter__(self) -> "OutputWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic() - self.started, self._count()))

    def first_rollout_s(self) -> float | None:
        return next((t for t, n in self.samples if n > 0), None)

    def steady_rate(self, rows: int, from_s: float) -> float | None:
        """Rollouts per second between `from_s` and the moment STEADY_UNTIL of `rows` were done."""
        start = next(((t, n) for t, n in self.samples if t >= from_s), None)
        end = next(((t, n) for t, n in self.samples if n >= STEADY_UNTIL * rows), None)
        if start is None or end is None or end[0] <= start[0]:
            return None
        return (end[1] - start[1]) / (end[0] - start[0])


def allowed_rollouts_per_s(args: argparse.Namespace, tokens_per_request: float) -> float:
    """The stub's budgets as rollouts per second: the tighter of requests and tokens, two requests a rollout."""
    minute_s = 60.0 * args.time_scale
    requests_per_s = min(args.requests_per_minute, args.tokens_per_minute / tokens_per_request) / minute_s
    return requests_per_s / CALLS_PER_ROLLOUT


def measure(url: str, args: argparse.Namespace, rows: int, output: Path, command: list[str], env: dict[str, str],
            cwd: Path) -> dict[str, Any]:
    """Run one collector command and measure it against the stub."""
    before = stats(url)
    with OutputWatch(output) as watch:
        result = run_child(command, env=env, cwd=cwd, timeout_s=3600)
    seen = _deltas(before, stats(url))
    wall = watch.samples[-1][0]
    done = watch.samples[-1][1]
    tokens_per_request = seen["tokens_admitted"] / max(seen["completed"], 1)
    allowed = allowed_rollouts_per_s(args, tokens_per_request)
    steady = watch.steady_rate(rows, 60.0 * args.time_scale)
    figures: dict[str, Any] = {
        "exit_status": result.returncode, "rollouts": done, "failed_rollouts": rows - done, "wall_s": round(wall, 1),
        "time_to_first_rollout_s": watch.first_rollout_s(),
        "allowed_rollouts_per_s": round(allowed, 3),
        "goodput_after_first_minute": round(steady / allowed, 3) if steady is not None else None,
        "goodput_whole_run": round(done / wall / allowed, 3),
        "requests_429_per_rollout": round(seen["rate_limited"] / max(done, 1), 4),
        "endpoint_requests_per_model_call": round(seen["requests"] / max(seen["completed"], 1), 4),
        "stub": seen, "load_average": load_average(),
    }
    progress = output.with_name(f"{output.stem}_progress.json")
    if progress.exists():  # ours: the rollout attempts, from its progress file
        snapshot = orjson.loads(progress.read_bytes())
        figures["rollout_attempts_per_rollout"] = round(
            1 + snapshot["retries"]["rollouts"] / max(done, 1), 4)
    return figures


def ours_collect(stack_head: str, url: str, args: argparse.Namespace, rows_path: Path, rows: int, output: Path,
                 agent: str) -> dict[str, Any]:
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", "from nemo_gym.cli.collect import main; main()", f"+head_server_url={stack_head}",
               f"+agent_name={agent}", f"+input_jsonl_fpath={rows_path}", f"+output_jsonl_fpath={output}",
               f"+num_samples_in_parallel={args.concurrency}"]
    return measure(url, args, rows, output, command, _env(), output.parent)


def reference_collect(work: Path, head_port: int, url: str, args: argparse.Namespace, rows_path: Path, rows: int,
                      output: Path) -> dict[str, Any]:
    command = [str(NG_PYTHON), "-I", "-c", "import sys; sys.argv[0] = 'ng_collect_rollouts'\n"
               "from nemo_gym.cli.legacy import main\nmain()", "+head_server.host=127.0.0.1",
               f"+head_server.port={head_port}", f"+input_jsonl_fpath={rows_path}", f"+output_jsonl_fpath={output}",
               f"+agent_name={WEATHER_AGENT}", f"+num_samples_in_parallel={args.concurrency}"]
    return measure(url, args, rows, output, command, _reference_env(work), work)


def _stops(url: str, command: list[str], env: dict[str, str], cwd: Path, output: Path) -> dict[str, Any]:
    """How a collector ends with the wrong model name: its time, exit status, stderr's last line, the stub's count."""
    before = stats(url)
    started = time.monotonic()
    try:
        result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                                timeout=WRONG_MODEL_CAP_S)
        code, err = result.returncode, result.stderr.strip().splitlines()
    except subprocess.TimeoutExpired:
        code, err = None, [f"still running after {WRONG_MODEL_CAP_S:.0f} s (stopped by the benchmark)"]
    seen = _deltas(before, stats(url))
    return {"seconds_until_stopped": round(time.monotonic() - started, 2), "exit_status": code,
            "stderr_last_line": err[-1][:300] if err else "", "stderr_lines": len(err),
            "requests_sent": seen["requests"] + seen["models_listed"], "files_written": output.parent.exists()
            and any(output.parent.iterdir())}


def wrong_model(url: str, ours_head: str, ref: tuple[Path, int], rows_path: Path, work: Path) -> dict[str, Any]:
    """The stub now serves another name: what each collector does with rows asking for the old one."""
    control(url, model="renamed")
    try:
        runs = {}
        out = work / "wrong_ours" / "out.jsonl"
        out.parent.mkdir()
        runs["ours_ng_collect_rollouts"] = _stops(
            url, [sys.executable, "-c", "from nemo_gym.cli.collect import main; main()",
                  f"+head_server_url={ours_head}", f"+agent_name={WEATHER_AGENT}", f"+input_jsonl_fpath={rows_path}",
                  f"+output_jsonl_fpath={out}"], _env(), out.parent, out)
        out = work / "wrong_e2e" / "out.jsonl"
        out.parent.mkdir()
        runs["ours_ng_e2e_collect_rollouts"] = _stops(  # in the checkout: the config's dataset paths are relative
            url, [sys.executable, "-c", "from nemo_gym.cli.e2e import main; main()",
                  f"+config_paths=[{REPO_ROOT / WEATHER_CONFIG},{REPO_ROOT / 'configs/vllm_model.yaml'}]",
                  f"+policy_base_url={url}", f"+policy_api_key={KEY}", f"+policy_model_name={MODEL}",
                  "+split=example", f"+output_jsonl_fpath={out}", f"+log_dir={out.parent / 'logs'}"], _env(),
            REPO_ROOT, out)
        ref_work, ref_port = ref
        out = ref_work / "wrong" / "out.jsonl"
        out.parent.mkdir()
        runs["nemo_gym_0_4_0"] = _stops(
            url, [str(NG_PYTHON), "-I", "-c", "import sys; sys.argv[0] = 'ng_collect_rollouts'\n"
                  "from nemo_gym.cli.legacy import main\nmain()", "+head_server.host=127.0.0.1",
                  f"+head_server.port={ref_port}", f"+input_jsonl_fpath={rows_path}", f"+output_jsonl_fpath={out}",
                  f"+agent_name={WEATHER_AGENT}"], _reference_env(ref_work), ref_work, out)
        return runs
    finally:
        control(url, model=MODEL)


def ours_config(url: str, args: argparse.Namespace, stub: dict[str, Any]) -> dict[str, Any]:
    """The stub (a server of our stack, so ng_run starts it and waits for it), the weather stack's model server as
    it is (no limits: learned) and a second one with the stub's limits."""
    per_real_minute = 1.0 / args.time_scale
    model = {"base_url": url, "api_key": KEY, "model": MODEL}
    limited = {**model, "max_requests_per_minute": int(args.requests_per_minute * per_real_minute),
               "max_tokens_per_minute": int(args.tokens_per_minute * per_real_minute)}
    return {
        "hosted_api": {"responses_api_models": {"hosted_api_stub": stub}},
        "policy_model": {"responses_api_models": {"vllm_model": model}},
        "limited_model": {"responses_api_models": {"vllm_model": limited}},
        LIMITED_AGENT: {"responses_api_agents": {"simple_agent": {
            "resources_server": {"type": "resources_servers", "name": "example_single_tool_call"},
            "model_server": {"type": "responses_api_models", "name": "limited_model"}}}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests-per-minute", type=int, default=600)
    parser.add_argument("--tokens-per-minute", type=int, default=50_000)
    parser.add_argument("--time-scale", type=float, default=1.0, help="the stub's minute is 60 * this seconds")
    parser.add_argument("--minutes", type=float, default=3.0, help="about how long each collection runs")
    parser.add_argument("--concurrency", type=int, default=64, help="rollouts in flight at most, both sides")
    parser.add_argument("--quick", action="store_true", help="one minute per collection")
    args = parser.parse_args()
    if args.quick:
        args.minutes = 1.0
    # Rows for `minutes` at the allowed rate (about 110 tokens a request: the prompt plus max_tokens).
    rows = max(50, int(args.minutes * 60 * allowed_rollouts_per_s(args, MAX_OUTPUT_TOKENS + 10)))
    with recording("hosted_api", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="nghosted_", dir="/tmp") as tmp:  # short: Ray's socket paths
        work = Path(tmp)
        rows_path = write_rows(work / "rows.jsonl", rows, max_output_tokens=MAX_OUTPUT_TOKENS)
        runs: dict[str, Any] = {}
        stub = stub_settings(args, free_port())
        url = f"http://127.0.0.1:{stub['port']}/v1"
        with ng_run(work / "ours", ours_config(url, args, stub), (WEATHER_CONFIG,)) as ours, \
                reference_stack(work / "ref", url) as ref_port:
            for name, agent in (("ours_limits_configured", LIMITED_AGENT), ("ours_limits_learned", WEATHER_AGENT)):
                runs[name] = ours_collect(ours.head_url, url, args, rows_path, rows, work / name / "out.jsonl",
                                          agent)
                print(f"{name}: {runs[name]}", flush=True)
            runs["nemo_gym_0_4_0"] = reference_collect(work / "ref", ref_port, url, args, rows_path, rows,
                                                       work / "ref" / "out.jsonl")
            print(f"nemo_gym_0_4_0: {runs['nemo_gym_0_4_0']}", flush=True)
            wrong = wrong_model(url, ours.head_url, (work / "ref", ref_port), rows_path, work)
            print(f"wrong model name: {wrong}", flush=True)
        ours_best, theirs = runs["ours_limits_configured"], runs["nemo_gym_0_4_0"]
        ratios = {
            "goodput_ours_configured": ours_best["goodput_after_first_minute"],
            "goodput_ours_learned": runs["ours_limits_learned"]["goodput_after_first_minute"],
            "goodput_nemo_gym": theirs["goodput_after_first_minute"],
            "429s_per_rollout_nemo_gym_vs_ours_configured": (
                round(theirs["requests_429_per_rollout"] / ours_best["requests_429_per_rollout"], 1)
                if ours_best["requests_429_per_rollout"] else None),
        }
        recorder.write(ratios, {"settings": {
            "stub": {key: value for key, value in stub_settings(args, 0).items() if key not in ("entrypoint", "port")},
            "time_scale_note": "a budget's minute and every latency are scaled by time_scale (1.0: real time)",
            "rows": rows, "concurrency": args.concurrency, "calls_per_rollout": CALLS_PER_ROLLOUT,
            "max_output_tokens": MAX_OUTPUT_TOKENS, "environment": "example_single_tool_call",
            "goodput": f"completed rollouts/s over the allowed rate, from the end of the first minute until "
                       f"{STEADY_UNTIL:.0%} of the rollouts are done"},
            "runs": runs, "wrong_model_name": wrong})


if __name__ == "__main__":
    main()
