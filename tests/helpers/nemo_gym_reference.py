"""NeMo Gym 0.4.0 itself (in .venv-nemo-gym, installed by scripts/setup_tests.sh), run as a user would run it.

The one helper that runs it for tests. `reference_stack` starts its `ng_run` with the example_single_tool_call
environment, simple agent and vllm_model on a free head port, with Ray isolated (its own RAY_TMPDIR; RAY_ADDRESS unset, so it never joins another cluster),
and stops it and every process it spawned however the test ends: SIGTERM to its process group, SIGKILL after a
grace period, then SIGKILL to any process still carrying this stack's tag in its environment (Ray daemons and
workers inherit it); if the test process itself is killed, ng_run gets SIGTERM from the kernel; Ray's usage
reporting is off. `reference_collect` runs its collector, `run_reference_python` its interpreter. Nothing here
skips: a missing NeMo Gym is a test failure.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from nemo_gym.server.process_group import die_with_parent, stop_process_groups
from tests.helpers.stack import REPO_ROOT, free_port

NEMO_GYM_VENV = REPO_ROOT / ".venv-nemo-gym"
EXAMPLE_ENV = "resources_servers/example_single_tool_call"
SERVER_DIRS = (EXAMPLE_ENV, "responses_api_agents/simple_agent", "responses_api_models/vllm_model")
AGENT = "example_single_tool_call_simple_agent"
TAG_ENV = "NG_COMPAT_TEST_TAG"
READY = re.compile(rb"All (\d+) / \1 servers ready")
REFERENCE_STOP_GRACE_S = 60.0
RAY_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def site_packages() -> Path:
    """NeMo Gym's site-packages; fails the test (never skips) when it is not installed."""
    found = sorted(NEMO_GYM_VENV.glob("lib/python3.*/site-packages/nemo_gym/__init__.py"))
    if not found or not (NEMO_GYM_VENV / "bin" / "ng_run").exists():
        pytest.fail(f"NeMo Gym 0.4.0 is not installed in {NEMO_GYM_VENV}: run `bash scripts/setup_tests.sh`")
    return found[0].parent.parent


def reference_python() -> Path:
    """NeMo Gym's interpreter; fails the test (never skips) when it is not installed."""
    site_packages()
    return NEMO_GYM_VENV / "bin" / "python"


def example_rows() -> Path:
    return site_packages() / EXAMPLE_ENV / "data" / "example.jsonl"


def reference_env(tag: str | None = None) -> dict[str, str]:
    """The environment NeMo Gym's commands run in: none of our PYTHONPATH (both packages are called nemo_gym), no
    other Ray cluster to join, Ray on loopback, and Ray's usage reporting off."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "VIRTUAL_ENV")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray's node on loopback: otherwise it takes the address of the machine's outward interface, and tests send
    # nothing beyond loopback. (Ray reads this switch on every platform; off, a node is local-only.)
    env[RAY_CLUSTER_SWITCH] = "0"
    if tag:
        env[TAG_ENV] = tag
    return env


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries `tag`."""
    needle = f"{TAG_ENV}={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return pids


def kill_tagged(tag: str) -> list[int]:
    """SIGKILL every process whose environment carries `tag`; the pids it found."""
    pids = tagged_pids(tag)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


@dataclass
class ReferenceStack:
    head_port: int
    log_path: Path
    tag: str

    @property
    def head_url(self) -> str:
        return f"http://127.0.0.1:{self.head_port}"


def _venv_dir(root: Path) -> Path:
    """`DIR/<kind>/<name>/.venv` -> NeMo Gym's venv for each server, so its ng_run creates no venvs."""
    for server_dir in SERVER_DIRS:
        link = root / server_dir / ".venv"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(NEMO_GYM_VENV.resolve())
    return root


@contextmanager
def reference_stack(workdir: Path, model_base_url: str, timeout_s: float = 420.0) -> Iterator[ReferenceStack]:
    """NeMo Gym's `ng_run` of its example environment, its model server pointed at `model_base_url`."""
    packages = site_packages()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "env.yaml").write_text(yaml.safe_dump(
        {"policy_base_url": model_base_url, "policy_api_key": "sk-compat-test", "policy_model_name": "instant"}))
    configs = [packages / EXAMPLE_ENV / "configs" / "example_single_tool_call.yaml",
               packages / "responses_api_models" / "vllm_model" / "configs" / "vllm_model.yaml"]
    head_port = free_port()
    tag = uuid.uuid4().hex
    # Ray's socket paths must stay short (108 bytes): a pytest tmp path can be too long.
    ray_dir = Path(tempfile.mkdtemp(prefix="ngray", dir="/tmp"))
    env = {**reference_env(tag), "RAY_TMPDIR": str(ray_dir)}
    args = [str(NEMO_GYM_VENV / "bin" / "ng_run"), f"+config_paths=[{','.join(map(str, configs))}]",
            "+head_server.host=127.0.0.1", f"+head_server.port={head_port}", "+skip_venv_if_present=true",
            f"+uv_venv_dir={_venv_dir(workdir / 'venvs')}"]
    log_path = workdir / f"nemo_gym_ng_run-{head_port}.log"
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(args, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
    try:
        deadline = time.monotonic() + timeout_s
        while not READY.search(log_path.read_bytes()):
            if popen.poll() is not None:
                pytest.fail(f"NeMo Gym's ng_run exited with {popen.returncode}:\n{log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"NeMo Gym's ng_run not ready after {timeout_s}s:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        httpx.get(f"http://127.0.0.1:{head_port}/server_instances", trust_env=False).raise_for_status()
        yield ReferenceStack(head_port, log_path, tag)
    finally:
        stop_process_groups([popen], REFERENCE_STOP_GRACE_S)
        kill_tagged(tag)
        shutil.rmtree(ray_dir, ignore_errors=True)


def reference_collect(cwd: Path, head_port: int, input_path: Path, output_path: Path, *extra: str,
                      timeout_s: float = 300.0, agent: str = AGENT) -> subprocess.CompletedProcess:
    """NeMo Gym's own `ng_collect_rollouts` against the head server on `head_port`, for the rows of `agent`."""
    site_packages()
    output_path.parent.mkdir(parents=True, exist_ok=True)  # NeMo Gym does not create it
    args = [str(NEMO_GYM_VENV / "bin" / "ng_collect_rollouts"), "+head_server.host=127.0.0.1",
            f"+head_server.port={head_port}", f"+agent_name={agent}", f"+input_jsonl_fpath={input_path}",
            f"+output_jsonl_fpath={output_path}", "+upload_rollouts_to_wandb=false", *extra]
    tag = uuid.uuid4().hex
    try:
        return subprocess.run(args, cwd=cwd, env=reference_env(tag), capture_output=True, text=True,
                              timeout=timeout_s)
    finally:
        kill_tagged(tag)


def run_reference_python(code: str, cwd: Path, timeout_s: float = 120.0) -> str:
    """stdout of `code` run by NeMo Gym's interpreter (isolated mode: this checkout cannot shadow its package)."""
    done = subprocess.run([str(reference_python()), "-I", "-c", code], cwd=cwd, env=reference_env(),
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode:
        pytest.fail(f"NeMo Gym's python failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout
