"""A real one-node Slurm cluster for the session (scripts/slurm_cluster.sh)."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.requirements import require
from tests.helpers.stack import REPO_ROOT
from tests.slurm.util import CLUSTER_LOCK, CLUSTER_LOCK_WAIT_S, cluster_lock

CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "slurm_cluster.sh"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """Start the one-node cluster (installing Slurm when root and it is missing); stop it after the session if we
    started it. The session holds the cluster alone meanwhile (`cluster_lock`): another test session on this machine
    would otherwise stop the cluster under this one's running jobs, or restart it with a clean slate (slurmctld -c)
    that forgets them, and its own arrays would share the node's CPUs with this one's."""
    require(os.geteuid() == 0 or shutil.which("sbatch") is not None,
            "Slurm is not installed and installing it needs root")
    with cluster_lock(CLUSTER_LOCK_WAIT_S) as held:
        if not held:
            pytest.fail(f"another test session has held the Slurm cluster ({CLUSTER_LOCK}) for "
                        f"{CLUSTER_LOCK_WAIT_S:.0f} s")
        done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"could not start the Slurm cluster:\n{done.stdout}\n{done.stderr}")
        started = done.stdout.strip().endswith("started")
        yield
        if started:
            subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop"], check=False, timeout=120)


@pytest.fixture
def slurm_jobs(slurm_cluster: None) -> Iterator[set[str]]:
    """The job ids a test submits (see util.submit); any still queued or running at teardown are cancelled, so a
    failed test leaves nothing behind for the next one."""
    ids: set[str] = set()
    yield ids
    if ids:
        subprocess.run(["scancel", *sorted(ids)], check=False)



LOG_TAIL_LINES = 120
CONTROLLER_LOG = Path(os.environ.get("NG_SLURM_STATE_DIR", "/tmp/nemo_gym_slurm")) / "slurmctld.log"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read: {exc.strerror})"


def run_logs(folder: Path) -> str:
    """What a failed Slurm test needs to say why: every run directory's submission record, its completion markers,
    and the last lines of every log under it (each task's job script log, ng_run's and each server's), then the
    controller's log, which says how each job ended."""
    parts = []
    for submission in sorted(folder.rglob("slurm/submission.json")):
        run = submission.parent.parent
        done = sorted(p.name for p in (run / "slurm").glob("*.done"))
        parts.append(f"=== {run}: done markers {done or 'none'}\n{submission.read_text()}")
        parts += [f"--- {log}\n{_tail(log)}" for log in sorted((run / "logs").rglob("*.log"))]
    parts.append(f"--- {CONTROLLER_LOG} (last 60 lines)\n{_tail(CONTROLLER_LOG, 60)}")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed Slurm test prints its runs' logs with its report (and pytest keeps its folder: the retention policy
    is `failed`), so a failure under load can be explained after the fact."""
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and call.when == "call" and isinstance(tmp_path, Path):
        report.sections.append(("Slurm run logs", f"kept in {tmp_path}\n{run_logs(tmp_path)}"))
