"""What the example trainer runs against: a vLLM that takes weight updates, and (for the agent path) an `ng_run`
stack in front of it. Each is started here and always stopped, or taken as given (`--vllm-url`)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import httpx

from nemo_gym.responses_api_models.local_vllm_model.weight_transfer import weight_transfer_args
from nemo_gym.server.ng_run_process import ng_run_process
from nemo_gym.server.supervisor import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "SmolLM2-135M-Instruct"
# The agent behind each task, from the environment's shipped config.
AGENTS = {"math": "math_simple_agent", "number_guess": "number_guess_agent"}


def _stop_group(popen: subprocess.Popen, grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(popen.pid, sig)
        except ProcessLookupError:
            return
        try:
            popen.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def vllm_server(model_dir: Path, log_path: Path, dtype: str, base_url: Optional[str] = None,
                timeout_s: float = 900.0, every_core: bool = False) -> Iterator[str]:
    """Yield the /v1 base URL of a vLLM serving `model_dir`: `base_url` as given, or one started here in `dtype`.

    Started here it binds 127.0.0.1 only and has VLLM_SERVER_DEV_MODE=1: its dev endpoints (weight reloads) can
    change what it serves, so they must not be reachable from elsewhere. vLLM's CPU build keeps one core free of its
    compute threads by default; `every_core` binds them to all of this process's cores instead, for a trainer that
    never computes while vLLM generates (synchronous GRPO; measured here: 32 completions 15% sooner on 2 cores). A
    VLLM_CPU_OMP_THREADS_BIND already set wins."""
    if base_url:
        yield base_url.rstrip("/")
        return
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
               "--dtype", dtype, "--max-model-len", "2048", "--enforce-eager",
               *weight_transfer_args(gpu=False)]  # the gloo weight transport's engine, for --weight-transport gloo
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    if every_core:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(str(core) for core in sorted(os.sched_getaffinity(0))))
    url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"vLLM exited with {popen.returncode}; see {log_path}")
            try:
                if httpx.get(f"{url}/models", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not serving after {timeout_s:.0f} s; see {log_path}")
            time.sleep(1)
        yield url
    finally:
        _stop_group(popen, grace_s=30.0)


def served_dtype(vllm_url: str) -> str:
    """The dtype a dev-mode vLLM computes in ("float32", "bfloat16", ...), from its /server_info."""
    root = vllm_url.rstrip("/").removesuffix("/v1")
    reply = httpx.get(f"{root}/server_info", params={"config_format": "json"}, timeout=30, trust_env=False)
    reply.raise_for_status()
    return str(reply.json()["vllm_config"]["model_config"]["dtype"]).removeprefix("torch.")


@contextmanager
def agent_stack(task: str, vllm_url: str, workdir: Path) -> Iterator[str]:
    """Yield the head server URL of an `ng_run` stack serving `task`'s agent on the policy at `vllm_url`."""
    configs = ",".join([str(REPO_ROOT / "nemo_gym" / "resources_servers" / task / "configs" / f"{task}.yaml"),
                        str(REPO_ROOT / "configs" / "vllm_model.yaml")])
    head_port = free_port()
    args = [f"+config_paths=[{configs}]", f"+policy_base_url={vllm_url}", "+policy_api_key=EMPTY",
            f"+policy_model_name={SERVED_NAME}", f"+head_server.port={head_port}"]
    with ng_run_process(args, workdir, workdir / "ng_run.log", timeout_s=300.0):
        yield f"http://127.0.0.1:{head_port}"
