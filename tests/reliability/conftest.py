"""The real stack the reliability suite runs against, started once per session:

    ng_collect_rollouts -> simple_agent -> example_single_tool_call (weather) env
                                        -> vllm_model -> FaultProxy (in this process) -> instant_chat stub

The config carries a secret policy api key (the stub checks it arrives) so the secrets test can grep for it.
"""

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Iterator

import orjson
import pytest
import yaml

from tests.helpers.stack import REPO_ROOT, Stack, environment_config, free_port, running_stack
from tests.reliability.apps.fault_proxy import FaultProxy

SECRET = "sk-RELIABILITY-SECRET-4b1d9e7a2c"
AGENT = "example_single_tool_call_simple_agent"
INSTANT_CHAT = Path(__file__).parent / "apps" / "instant_chat.py"
WEATHER_ENV = environment_config("example_single_tool_call")
WEATHER_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "example_single_tool_call" / "data" / "example.jsonl"
CITIES = ("Paris", "Tokyo", "New York", "Sydney", "Cairo", "Lima")


def stack_args(workdir: Path, chat_port: int, model_base_url: str) -> list[str]:
    """ng_run arguments: the weather env and agent, vllm_model at `model_base_url`, the stub on `chat_port`."""
    tree = {
        "policy_api_key": SECRET,
        "chat_stub": {"responses_api_models": {"instant_chat": {
            "entrypoint": str(INSTANT_CHAT), "port": chat_port, "expected_api_key": "${policy_api_key}"}}},
        "policy_model": {"responses_api_models": {"vllm_model": {
            "base_url": model_base_url, "api_key": "${policy_api_key}", "model": "instant", "request_timeout_s": 2}}},
    }
    (workdir / "model.yaml").write_text(yaml.safe_dump(tree))
    return [f"+config_paths=[{WEATHER_ENV},{workdir / 'model.yaml'}]", f"+log_dir={workdir / 'ng_logs'}"]


def write_weather_rows(path: Path, n: int, padding: int = 0, padded_every: int = 1) -> Path:
    """`n` weather questions the stub answers correctly (reward 1), cycling through `CITIES`. With `padding` > 0,
    every `padded_every`-th row gets a field of that many characters, which its rollout carries to its output line."""
    tools = orjson.loads(WEATHER_ROWS.read_bytes().splitlines()[0])["responses_create_params"]["tools"]
    with open(path, "wb") as out:
        for i in range(n):
            city = CITIES[i % len(CITIES)]
            params = {"input": [{"role": "user", "content": f"Question {i}: what's the weather in {city}?"}],
                      "tools": tools}
            row = {"responses_create_params": params, "expected_city": city}
            if padding and i % padded_every == 0:
                row["padding"] = "x" * padding
            out.write(orjson.dumps(row) + b"\n")
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ReliabilityStack:
    def __init__(self, stack: Stack, workdir: Path, proxy: FaultProxy) -> None:
        self.stack = stack
        self.workdir = workdir
        self.proxy = proxy

    def args(self, *extra: str) -> list[str]:
        """ng_collect_rollouts arguments for this stack's agent."""
        return [f"+head_server.port={self.stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}", *extra]


@pytest.fixture(scope="session")
def reliability_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReliabilityStack]:
    workdir = tmp_path_factory.mktemp("reliability_stack")
    chat_port = free_port()
    proxy = FaultProxy(f"http://127.0.0.1:{chat_port}", rate=0.0, seed=20240611)
    proxy_port = proxy.start()
    try:
        with running_stack(stack_args(workdir, chat_port, f"http://127.0.0.1:{proxy_port}/v1"), cwd=workdir) as stack:
            yield ReliabilityStack(stack, workdir, proxy)
    finally:
        proxy.stop()


@pytest.fixture
def faults_off(reliability_stack: ReliabilityStack) -> Iterator[ReliabilityStack]:
    """The shared stack with the proxy passing every request through (and left that way afterwards)."""
    proxy = reliability_stack.proxy
    proxy.rate, proxy.plan, proxy.injected_keys = 0.0, {}, {}
    yield reliability_stack
    proxy.rate, proxy.plan, proxy.injected_keys = 0.0, {}, {}


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Block until `path` holds at least `n` lines while `proc` keeps running."""
    deadline = time.monotonic() + timeout_s
    while line_count(path) < n:
        assert proc.poll() is None, f"the collector exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path} did not reach {n} lines in {timeout_s} s"
        time.sleep(0.05)
