"""One retry budget from the collector to the model (docs/architecture.md, "Retry budget"): the model calls behind
one completion that always fails, counted at a loopback stub model, through the real agent and model server.

    ng_collect_rollouts | trajectory collector -> simple_agent -> vllm_model -> stub "vLLM" (always 503, counts)

Before the budget, every hop retried on its own: the CLI's 3 attempts cost 3 x 3 x 3 = 27 model calls, and the
collector's 3 group attempts 3 x 3 x 3 x 3 = 81.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from nemo_gym.experience.interfaces import DatumSpec
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from tests.collection.util import read_rows, run_cli, sidecar
from tests.experience.collector_fakes import master_config, wait_for
from tests.helpers.stack import Stack, free_port, running_stack
from tests.reliability.conftest import AGENT, stack_args, write_weather_rows

ATTEMPTS = 3


class FailingModel:
    """A Chat Completions endpoint on 127.0.0.1 that answers every request 503 and counts them."""

    def __init__(self) -> None:
        self.calls = 0
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length", 0)))
                model.calls += 1  # handlers run one at a time here: the test sends one request at a time
                body = b'{"error": "always failing"}'
                self.send_response(503)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FailingModel":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture(scope="module")
def failing_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, FailingModel, Path]]:
    workdir = tmp_path_factory.mktemp("retry_budget")
    with FailingModel() as model, running_stack(stack_args(workdir, free_port(), model.url), cwd=workdir) as stack:
        yield stack, model, workdir


def test_the_cli_spends_max_attempts_model_calls_on_a_failing_rollout(
        failing_stack: tuple[Stack, FailingModel, Path]) -> None:
    stack, model, workdir = failing_stack
    rows, out = write_weather_rows(workdir / "one.jsonl", 1), workdir / "cli.jsonl"
    model.calls = 0
    result = run_cli("collect", [f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
                                 f"+input_jsonl_fpath={rows}", f"+output_jsonl_fpath={out}",
                                 f"+max_attempts={ATTEMPTS}", "+retry_backoff_s=0"], workdir, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    [failure] = read_rows(sidecar(out, "_failures.jsonl"))
    assert (failure["failure_class"], failure["attempts"]) == ("http_5xx", ATTEMPTS)
    assert model.calls == ATTEMPTS


def test_the_collector_spends_max_group_attempts_model_calls_on_a_failing_completion(
        failing_stack: tuple[Stack, FailingModel, Path]) -> None:
    stack, model, workdir = failing_stack
    config = master_config(1, 1, max_group_attempts=ATTEMPTS, max_epochs=1)
    config["grpo"]["num_generations_per_prompt"] = 1
    config["env"] = {"should_use_nemo_gym": True}
    row = orjson.loads(write_weather_rows(workdir / "prompt.jsonl", 1).read_bytes())
    prompt = DatumSpec(message_log=[], extra_env_info={**row, "agent_ref": {"name": AGENT}}, task_name="weather",
                       idx=0)

    # As a trainer builds it (examples/grpo/train.py): the helper's own default is 3 attempts per rollout.
    manager = RolloutManager(None, {}, 1, 512, generation_config={"max_new_tokens": 16}, use_nemo_gym=True,
                             head_server_url=stack.head_url)
    collector = AsyncTrajectoryCollector(None, None, {}, config, ReplayBuffer(2), rollout_manager=manager)
    policy = manager.impl.rollout_helper.policy
    assert (policy.max_attempts, policy.rollout_timeout_s) == (1, 600.0)  # nested within group_timeout_s (600)
    model.calls = 0
    try:
        collector.start_collection(StatefulPromptLoader([prompt], 1, shuffle=False))
        assert wait_for(collector.get_failed_groups, 60)
    finally:
        collector.shutdown()
    [failed] = collector.get_failed_groups()
    assert failed.attempts == ATTEMPTS and "http_5xx" in failed.error, failed
    assert model.calls == ATTEMPTS
