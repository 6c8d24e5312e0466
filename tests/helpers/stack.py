"""Run real `ng_run` subprocesses in tests and stop them cleanly."""

import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from nemo_gym.server.ng_run_process import ng_run_process
from nemo_gym.server.supervisor import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def environment_config(name: str) -> Path:
    """The shipped config of environment `name`: it lives in the environment's own folder."""
    return REPO_ROOT / "nemo_gym" / "resources_servers" / name / "configs" / f"{name}.yaml"


class Stack:
    def __init__(self, popen: subprocess.Popen, head_url: str, log_path: Path) -> None:
        self.popen = popen
        self.head_url = head_url
        self.log_path = log_path

    def servers(self) -> dict[str, str]:
        listing = httpx.get(f"{self.head_url}/servers", trust_env=False).json()["servers"]
        return {s["name"]: s["url"] for s in listing}

    def url(self, name: str) -> str:
        return self.servers()[name]


def ng_run_refusal(args: list[str], cwd: Path) -> str:
    """Run `ng_run ARGS` in `cwd`, which must refuse its config before any server starts: asserts exit 2 and that no
    server log was written; returns its standard error."""
    log_dir = cwd / "logs"
    done = subprocess.run(
        [sys.executable, "-c", "from nemo_gym.cli.run import main; main()", *args,
         f"+head_server.port={free_port()}", f"+log_dir={log_dir}"],
        cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not log_dir.exists()  # nothing was started
    return done.stderr


@contextmanager
def running_stack(args: list[str], cwd: Path, timeout_s: float = 120.0) -> Iterator[Stack]:
    """Start `ng_run ARGS` in `cwd` on a free head port; yield once every server is healthy; stop it afterwards."""
    head_port = free_port()
    log_path = cwd / f"ng_run-{head_port}.log"
    with ng_run_process([*args, f"+head_server.port={head_port}"], cwd, log_path, timeout_s=timeout_s) as popen:
        yield Stack(popen, f"http://127.0.0.1:{head_port}", log_path)


@contextmanager
def math_and_game_agents(policy_base_url: str, model_name: str, cwd: Path) -> Iterator[Stack]:
    """The math and number-guessing environments with their agents, and vllm_model pointed at `policy_base_url`."""
    configs = ",".join([str(environment_config("math")), str(environment_config("number_guess")),
                        f"{REPO_ROOT}/configs/vllm_model.yaml"])
    model = [f"+policy_base_url={policy_base_url}", "+policy_api_key=EMPTY", f"+policy_model_name={model_name}"]
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=cwd) as stack:
        yield stack


def plain_bind_refused(port: int) -> bool:
    """Whether a socket bound as most programs bind (no SO_REUSEADDR, no SO_REUSEPORT) is refused 127.0.0.1:`port`:
    the port is held (a bind to port 0 never picks one that is bound)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
