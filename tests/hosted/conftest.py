"""One real stack for the hosted-API tests, started once per session:

    ng_collect_rollouts -> simple_agent ----> vllm_model `policy_model` (no limits: learns from 429s) -> stub
                        -> limited_agent ---> vllm_model `limited_model` (max_requests_per_minute, 2 workers) -> stub
                        -> strict_agent ----> vllm_model `strict_model` (a 429 fails the call at once) -> tight stub
                        -> quota_agent -----> vllm_model `quota_model` (max_rate_limit_wait_s=5) -> quota stub
                        -> replay_agent ----> vllm_model `replay_model` (2 workers) -> replay stub

The stub (benchmarks/perf/hosted_api_stub.py) is a rate-limited hosted API on loopback: 600 requests a minute, a
burst of one second of them, 429 with Retry-After beyond, answers in about 50 ms. `GET /stats` counts what it saw.
The tight stub allows 60 requests a minute (a burst of 2), so that more at once meet 429s by construction. The quota
stub answers as many requests as a test gives it (`HostedStack.set_quota`), then 429 insufficient_quota with
retry-after 3600, as a spent quota does.
"""

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.helpers.stack import REPO_ROOT, Stack, environment_config, free_port, running_stack

STUB = REPO_ROOT / "benchmarks" / "perf" / "hosted_api_stub.py"
STUB_MODEL, STUB_KEY = "stub-hosted", "sk-stub-hosted-test"
RPM = 600
AGENT, LIMITED_AGENT, STRICT_AGENT = "example_single_tool_call_simple_agent", "limited_agent", "strict_agent"
QUOTA_AGENT, QUOTA_MAX_WAIT_S = "quota_agent", 5
REPLAY_AGENT = "replay_agent"


def stub_settings(port: int, **overrides: Any) -> dict[str, Any]:
    return {"entrypoint": str(STUB), "port": port, "model": STUB_MODEL, "api_key": STUB_KEY,
            "requests_per_minute": RPM, "tokens_per_minute": 10_000_000, "latency_median_s": 0.05,
            "latency_sigma": 0.3, **overrides}


def weather_agent(model: str) -> dict[str, Any]:
    return {"responses_api_agents": {"simple_agent": {
        "resources_server": {"type": "resources_servers", "name": "example_single_tool_call"},
        "model_server": {"type": "responses_api_models", "name": model}}}}


def model_server(base_url: str, **settings: Any) -> dict[str, Any]:
    return {"responses_api_models": {"vllm_model": {"base_url": base_url, "api_key": STUB_KEY, "model": STUB_MODEL,
                                                    **settings}}}


class HostedStack:
    def __init__(self, stack: Stack, workdir: Path, stub_url: str, quota_url: str, replay_url: str) -> None:
        self.stack = stack
        self.workdir = workdir
        self.stub_url = stub_url  # ends in /v1
        self.quota_url = quota_url  # the quota stub's, ends in /v1
        self.replay_url = replay_url  # the replay tests' own stub's, ends in /v1

    def args(self, agent: str, *extra: str) -> list[str]:
        return [f"+head_server.port={self.stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={agent}", *extra]

    def stats(self, url: str | None = None) -> dict[str, int]:
        return httpx.get(f"{(url or self.stub_url).removesuffix('/v1')}/stats", trust_env=False, timeout=10).json()

    def control(self, url: str, **settings: Any) -> None:
        httpx.post(f"{url.removesuffix('/v1')}/control", json=settings, trust_env=False,
                   timeout=10).raise_for_status()

    def set_quota(self, requests: int | None) -> None:
        """The quota stub answers `requests` more requests (None: no quota), then refuses every one."""
        self.control(self.quota_url, quota_requests=requests)


@pytest.fixture(scope="session")
def hosted_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostedStack]:
    workdir = tmp_path_factory.mktemp("hosted_stack")
    port, tight_port, quota_port, replay_port = free_port(), free_port(), free_port(), free_port()
    stub_url, quota_url = f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{quota_port}/v1"
    replay_url = f"http://127.0.0.1:{replay_port}/v1"
    tree = {
        "hosted_api": {"responses_api_models": {"hosted_api_stub": stub_settings(port)}},
        "tight_api": {"responses_api_models": {"hosted_api_stub": stub_settings(tight_port, requests_per_minute=60)}},
        "policy_model": model_server(stub_url),
        "limited_model": model_server(stub_url, max_requests_per_minute=RPM, workers=2),
        "strict_model": model_server(f"http://127.0.0.1:{tight_port}/v1", max_rate_limited_attempts=1),
        "quota_api": {"responses_api_models": {"hosted_api_stub": stub_settings(quota_port)}},
        "quota_model": model_server(quota_url, max_rate_limit_wait_s=QUOTA_MAX_WAIT_S),
        LIMITED_AGENT: weather_agent("limited_model"),
        STRICT_AGENT: weather_agent("strict_model"),
        QUOTA_AGENT: weather_agent("quota_model"),
        "replay_api": {"responses_api_models": {"hosted_api_stub": stub_settings(replay_port)}},
        "replay_model": model_server(replay_url, workers=2),  # two processes append to one journal
        REPLAY_AGENT: weather_agent("replay_model"),
    }
    (workdir / "hosted.yaml").write_text(yaml.safe_dump(tree))
    configs = f"{environment_config('example_single_tool_call')},{workdir / 'hosted.yaml'}"
    with running_stack([f"+config_paths=[{configs}]"], cwd=workdir) as stack:
        yield HostedStack(stack, workdir, stub_url, quota_url, replay_url)
