"""kill -9 of the real vLLM mid-run, then a vLLM back at the same address and the run resumed: every key exactly once.

The test kills a vLLM of its own (never the session's). What answers at that address afterwards is the session's
vLLM behind a plain loopback relay (a second cold start would add a minute and prove nothing more): the running
stack must find a live server where the dead one was, without being restarted.
"""

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.collection.util import cli, keys, read_rows, run_cli, sidecar
from tests.helpers.model import GREEDY_SOLVED, VLLMServer, vllm_process
from tests.helpers.stack import REPO_ROOT, environment_config, free_port, running_stack
from tests.reliability.apps.fault_proxy import FaultProxy
from tests.reliability.conftest import wait_for_lines

pytestmark = pytest.mark.vllm

MATH_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"
ROWS, REPEATS = 24, 2
KILL_AFTER = 8  # rollouts on disk when vLLM is killed


@pytest.mark.timeout(1800)
def test_vllm_killed_mid_run_then_back_and_resumed_gives_every_key_once(tmp_path: Path,
                                                                        vllm_server: VLLMServer) -> None:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    out = tmp_path / "out" / "math.jsonl"
    failures_path = sidecar(out, "_failures.jsonl")
    configs = f"+config_paths=[{environment_config('math')},{REPO_ROOT}/configs/vllm_model.yaml]"
    model = [f"+policy_base_url={base_url}", "+policy_api_key=EMPTY", "+policy_model_name=SmolLM2-135M-Instruct"]
    with running_stack([configs, *model], cwd=tmp_path) as stack:
        # One attempt per rollout: a rollout vLLM's death interrupts is recorded as failed, not retried in place.
        # No failure rate stops the run (the retry budget's own tests cover that), so every key is tried once.
        args = ["+agent_name=math_simple_agent", f"+input_jsonl_fpath={MATH_ROWS}", f"+output_jsonl_fpath={out}",
                f"+limit={ROWS}", f"+num_repeats={REPEATS}", "+num_samples_in_parallel=4", "+max_attempts=1",
                "+max_failure_rate=1",
                f"+head_server_url={stack.head_url}", "+responses_create_params.temperature=0.0",
                "+responses_create_params.max_output_tokens=16"]
        with vllm_process(port, tmp_path / "vllm-1.log") as vllm:
            collector = subprocess.Popen(cli("collect", args), cwd=tmp_path, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
            try:
                wait_for_lines(out, KILL_AFTER, collector, timeout_s=300)
                os.killpg(vllm.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                stdout, _ = collector.communicate(timeout=300)
            finally:
                if collector.poll() is None:
                    collector.kill()
                    collector.wait()
        print(f"vLLM cold start {vllm.cold_start_s:.0f} s; the collector ended "
              f"{time.monotonic() - killed_at:.1f} s after the kill with {collector.returncode}")
        assert collector.returncode == 1, stdout
        done = keys(out)
        failures = read_rows(failures_path)
        failed = [(f["_ng_task_index"], f["_ng_rollout_index"]) for f in failures]
        classes = Counter(f["failure_class"] for f in failures)
        print(f"before the restart: {len(done)} rollouts done, {len(failed)} failed {dict(classes)}")
        everything = {(t, r) for t in range(ROWS) for r in range(REPEATS)}
        assert len(done) == len(set(done)) >= KILL_AFTER and len(failed) == len(set(failed)) > 0
        assert set(done).isdisjoint(failed) and set(done) | set(failed) == everything
        # vllm_model meets a refused or dropped connection (`connect`); the agent relays the deepest hop's class
        # (nemo_gym.server.base.downstream_failed), so the collector records `connect`, not the agent's own 502.
        assert set(classes) == {"connect"} and all("reward" not in f for f in failures)
        assert f"FAILED: {len(failed)} rollouts" in stdout

        relay = FaultProxy(vllm_server.base_url.removesuffix("/v1"), rate=0.0, seed=0)  # forwards every request
        relay.start(port)
        try:
            resumed = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path, timeout=600)
        finally:
            relay.stop()
        assert relay.requests > 0 and not relay.injected
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(failed)} failed ones will be retried" in resumed.stdout
    rows = read_rows(out)
    assert sorted(keys(out)) == sorted(everything)
    assert not failures_path.exists()
    missed = sorted({r["_ng_task_index"] for r in rows if r["_ng_task_index"] in GREEDY_SOLVED and r["reward"] != 1})
    assert not missed, f"greedy answers the model gets right scored 0 on tasks {missed}"
