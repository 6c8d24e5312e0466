"""NeMo Gym 0.4.0 itself (in .venv-nemo-gym), run beside this project for side-by-side tests.

`reference_stack` starts its `ng_run` on a free head port with Ray isolated in a temp dir of its own (no other Ray
cluster is joined, none of ours is left behind), and stops it, its servers and every Ray process it started, however
the test ends. A missing reference install raises: the test fails, it does not skip.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import httpx
import yaml

from nemo_gym.server.supervisor import free_port
from tests.helpers.stack import REPO_ROOT

REFERENCE_VENV = REPO_ROOT / ".venv-nemo-gym"
REFERENCE_PYTHON = REFERENCE_VENV / "bin" / "python"
SITE = REFERENCE_VENV / "lib" / "python3.12" / "site-packages"
STOP_GRACE_S = 45.0
READY_MARK = b"# Server Instances"  # its ng_run prints the table once every server has spun up


def reference_bin(name: str) -> Path:
    """A console script of the reference install; raises when NeMo Gym 0.4.0 is not installed."""
    path = REFERENCE_VENV / "bin" / name
    if not path.is_file():
        raise RuntimeError(f"NeMo Gym 0.4.0 is not installed at {REFERENCE_VENV} (bash scripts/setup_tests.sh installs it)")
    return path


def reference_env(ray_dir: Path | None = None) -> dict[str, str]:
    """The environment for reference processes: nothing of this checkout on the path, Ray confined to `ray_dir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PYTHON"))}
    env["PYTHONUNBUFFERED"] = "1"
    if ray_dir is not None:
        env["RAY_TMPDIR"] = str(ray_dir)
    return env


def run_reference_python(code: str, cwd: Path, timeout_s: float = 120.0) -> str:
    """stdout of `code` run by the reference interpreter (isolated mode: this checkout cannot shadow it)."""
    reference_bin("python")
    done = subprocess.run([str(REFERENCE_PYTHON), "-I", "-c", code], cwd=cwd, env=reference_env(),
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode:
        raise RuntimeError(f"reference python failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


@dataclass
class ReferenceStack:
    head_port: int
    workdir: Path
    log_path: Path

    def head_args(self) -> list[str]:
        return ["+head_server.host=127.0.0.1", f"+head_server.port={self.head_port}"]

    def collect(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
        """Its `ng_collect_rollouts` against this stack."""
        return subprocess.run([str(reference_bin("ng_collect_rollouts")), *self.head_args(), *args],
                              cwd=self.workdir, env=reference_env(), capture_output=True, text=True,
                              timeout=timeout_s)


def _link_server_venvs(venv_dir: Path, servers: Sequence[str]) -> None:
    """`ng_run +uv_venv_dir=DIR +skip_venv_if_present=true` finds DIR/<kind>/<name>/.venv: point each at the
    reference venv instead of letting it build one per server."""
    for server in servers:
        link = venv_dir / server / ".venv"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REFERENCE_VENV)


def _processes_mentioning(marker: str) -> list[int]:
    """Pids whose command line or environment holds `marker` (our private Ray dir): the Ray processes we started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if any(marker.encode() in (entry / part).read_bytes() for part in ("cmdline", "environ")):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _stop(popen: subprocess.Popen, ray_dir: Path) -> None:
    if popen.poll() is None:
        os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(popen.pid, sig)
        except ProcessLookupError:
            pass
        for pid in _processes_mentioning(str(ray_dir)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(1.0)
    popen.wait()


def _wait_healthy(popen: subprocess.Popen, head_port: int, log_path: Path, timeout_s: float) -> None:
    """Until the head server lists its servers and each of them answers HTTP."""
    deadline = time.monotonic() + timeout_s
    while True:
        if popen.poll() is not None:
            raise RuntimeError(f"NeMo Gym ng_run exited with {popen.returncode}:\n{log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"NeMo Gym ng_run not ready after {timeout_s}s:\n{log_path.read_text()[-4000:]}")
        try:
            instances = httpx.get(f"http://127.0.0.1:{head_port}/server_instances", trust_env=False).json()
            urls = [f"{instance['url']}/docs" for instance in instances]
            if (urls and READY_MARK in log_path.read_bytes()
                    and all(httpx.get(url, trust_env=False).status_code < 500 for url in urls)):
                return
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        time.sleep(1.0)


@contextmanager
def reference_stack(workdir: Path, config_paths: Sequence[Path], servers: Sequence[str], env_yaml: dict,
                    timeout_s: float = 300.0) -> Iterator[ReferenceStack]:
    """NeMo Gym's `ng_run` with `config_paths` in `workdir` (which gets `env.yaml`); `servers` are the
    '<kind>/<name>' folders it runs (for their venv links)."""
    ng_run = reference_bin("ng_run")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "env.yaml").write_text(yaml.safe_dump(env_yaml))
    venv_dir = workdir / "ng_venvs"
    _link_server_venvs(venv_dir, servers)
    # Short, private: Ray's socket paths must stay under 107 bytes, and no other Ray cluster may be joined.
    ray_dir = Path(tempfile.mkdtemp(prefix="ngref_ray_", dir="/tmp"))
    head_port = free_port()
    log_path = workdir / f"reference_ng_run-{head_port}.log"
    args = [f"+config_paths=[{','.join(map(str, config_paths))}]", "+head_server.host=127.0.0.1",
            f"+head_server.port={head_port}", "+skip_venv_if_present=true", f"+uv_venv_dir={venv_dir}"]
    with open(log_path, "wb") as log:
        popen = subprocess.Popen([str(ng_run), *args], cwd=workdir, env=reference_env(ray_dir), stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(popen, head_port, log_path, timeout_s)
        yield ReferenceStack(head_port, workdir, log_path)
    finally:
        try:
            _stop(popen, ray_dir)
        finally:
            shutil.rmtree(ray_dir, ignore_errors=True)
