"""What every benchmark needs: a real `ng_run` stack in a scratch folder, input rows, and the real collector run in
a subprocess of its own so that its peak RSS and CPU are its own."""

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import orjson
import psutil
import yaml

from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed
from nemo_gym.server.launch import SPEC_ENV
from nemo_gym.server.ng_run_process import ng_run_process
from nemo_gym.server.supervisor import free_port

WEATHER_CONFIG = "nemo_gym/resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml"
STUB_CHAT = REPO_ROOT / "benchmarks" / "perf" / "stub_chat.py"
FAULT_AGENT = REPO_ROOT / "tests" / "collection" / "apps" / "fault_agent.py"
WEATHER_AGENT = "example_single_tool_call_simple_agent"
CITIES = ("Paris", "Tokyo", "New York", "Sydney", "Cairo", "Lima")
RESULT_PREFIX = "BENCH_RESULT "


def _env() -> dict[str, str]:
    # An existing PYTHONPATH goes first, so another checkout of nemo_gym can be measured with these benchmarks.
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO_ROOT)) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def weather_row(i: int, tools: bool = True, max_output_tokens: int | None = None) -> dict[str, Any]:
    city = CITIES[i % len(CITIES)]
    params: dict[str, Any] = {"input": [{"role": "user", "content": f"What's the weather in {city}?"}]}
    if tools:
        params["tools"] = [{
            "type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }]
    if max_output_tokens is not None:
        params.update(max_output_tokens=max_output_tokens, temperature=0.0)
    return {"responses_create_params": params, "expected_city": city}


def write_rows(path: Path, n: int, **kwargs: Any) -> Path:
    with open(path, "wb") as out:
        for i in range(n):
            out.write(orjson.dumps(weather_row(i, **kwargs), option=orjson.OPT_APPEND_NEWLINE))
    return path


class Stack:
    def __init__(self, popen: subprocess.Popen, head_port: int, workdir: Path) -> None:
        self.popen = popen
        self.head_port = head_port
        self.head_url = f"http://127.0.0.1:{head_port}"
        self.workdir = workdir
        self.model_base_url: str | None = None

    def server_pids(self) -> dict[int, str]:
        """Every process of the stack, by pid: the server it serves (its launcher and workers alike), or "ng_run"."""
        root = psutil.Process(self.popen.pid)
        out = {}
        for proc in (root, *root.children(recursive=True)):
            try:
                spec = proc.environ().get(SPEC_ENV)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            served = orjson.loads(spec) if spec else None  # a list: the servers that share a process
            out[proc.pid] = ("ng_run" if served is None else served["name"] if isinstance(served, dict)
                             else "+".join(entry["name"] for entry in served))
        return out

    def cpu_s_by_server(self) -> dict[str, float]:
        """CPU seconds so far of each server of the stack (a server's launcher and worker processes together), by
        server name; `ng_run` itself (and the head server it runs) under "ng_run"."""
        out: dict[str, float] = {}
        for pid, name in self.server_pids().items():
            if (cpu_s := process_cpu_s(pid)) is not None:
                out[name] = out.get(name, 0.0) + cpu_s
        return out


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) used so far by process `pid`; None once it has exited."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return None
    return times.user + times.system


@contextmanager
def ng_run(workdir: Path, config: dict[str, Any], config_paths: tuple[str, ...] = (), overrides: tuple[str, ...] = (),
           timeout_s: float = 180.0) -> Iterator[Stack]:
    """Start `ng_run` with `config` (plus repo config files) in `workdir`; yield once every server is healthy."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench_yaml = workdir / "bench.yaml"
    bench_yaml.write_text(yaml.safe_dump(config))
    paths = ",".join([*(str(REPO_ROOT / p) for p in config_paths), str(bench_yaml)])
    head_port = free_port()
    args = [f"+config_paths=[{paths}]", f"+head_server.port={head_port}", *overrides]
    with ng_run_process(args, workdir, workdir / "ng_run.log", env=_env(), timeout_s=timeout_s) as popen:
        yield Stack(popen, head_port, workdir)


@contextmanager
def weather_stack(workdir: Path, model_base_url: str | None = None, model_name: str = "stub",
                  overrides: tuple[str, ...] = (), colocate: bool = False) -> Iterator[Stack]:
    """simple_agent + the weather environment + vllm_model, in front of `model_base_url` or of the instant stub;
    `overrides` are more ng_run arguments. One process per server (ng_run's default, whose CPU splits by server)
    unless `colocate` (nemo_gym.server.colocated); `colocated` measures both."""
    config: dict[str, Any] = {}
    if model_base_url is None:
        stub_port = free_port()
        # The stub stands for a vLLM: a process of its own, as one would be.
        config["stub_chat"] = {"responses_api_models": {"stub_chat": {"entrypoint": str(STUB_CHAT), "port": stub_port,
                                                                      "own_process": True}}}
        model_base_url = f"http://127.0.0.1:{stub_port}/v1"
    policy = (f"+policy_base_url={model_base_url}", "+policy_api_key=none", f"+policy_model_name={model_name}",
              f"+colocate_servers={str(colocate).lower()}")
    with ng_run(workdir, config, (WEATHER_CONFIG, "configs/vllm_model.yaml"), (*policy, *overrides)) as s:
        s.model_base_url = model_base_url
        yield s


@contextmanager
def instant_agent_stack(workdir: Path) -> Iterator[Stack]:
    """One instance of the tests' instant agent: measures the collector alone."""
    config = {"instant_agent": {"responses_api_agents": {"fault_agent": {"entrypoint": str(FAULT_AGENT)}}}}
    with ng_run(workdir, config) as stack:
        yield stack


def run_collector(stack: Stack, input_path: Path, output_path: Path, agent: str, concurrency: int,
                  *extra: str, timeout_s: float = 1800.0, wrapper: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the real collector in a subprocess (under `wrapper`, a command that runs the one after it: a profiler);
    its summary, wall time, peak RSS (VmHWM) and the CPU time per rollout of the collector plus all servers."""
    args = [
        f"+head_server_url={stack.head_url}", f"+agent_name={agent}", f"+input_jsonl_fpath={input_path}",
        f"+output_jsonl_fpath={output_path}", f"+num_samples_in_parallel={concurrency}", "+disable_aggregation=true",
        *extra,
    ]
    log_path = output_path.with_suffix(".collector.log")
    # CPU time rather than rates: a figure that other load on the machine does not skew.
    started, by_server = time.monotonic(), stack.cpu_s_by_server()
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [*wrapper, sys.executable, "-m", "benchmarks.perf.collector_child", *args],
            cwd=stack.workdir, stdout=subprocess.PIPE, stderr=log, env=_env(), timeout=timeout_s,
        )
    wall = time.monotonic() - started
    by_server = {name: cpu_s - by_server.get(name, 0.0) for name, cpu_s in stack.cpu_s_by_server().items()}
    servers_cpu = sum(by_server.values())
    lines = [line for line in proc.stdout.decode().splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise BenchmarkFailed(f"collector failed ({proc.returncode}):\n{proc.stdout.decode()[-2000:]}\n"
                           f"{log_path.read_text()[-2000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    if result["failed"]:
        raise BenchmarkFailed(f"{result['failed']} of {result['succeeded'] + result['failed']} rollouts failed "
                              f"(see {output_path.name}'s failures file); a rate over them would mean nothing")
    rollouts = max(1, result["succeeded"] + result["failed"])
    collector_cpu_s = result.pop("cpu_s")
    cpu_ms = 1000 * (servers_cpu + collector_cpu_s) / rollouts
    by_process = {"collector": collector_cpu_s, **by_server}
    return {**result, "wall_s": round(wall, 2), "cpu_ms_per_rollout": round(cpu_ms, 3),
            "cpu_ms_per_rollout_by_process": {name: round(1000 * cpu_s / rollouts, 3)
                                              for name, cpu_s in sorted(by_process.items(), key=lambda kv: -kv[1])}}
