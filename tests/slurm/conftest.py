"""A real one-node Slurm cluster for the session (scripts/slurm_cluster.sh)."""

import os
import shutil
import subprocess
from typing import Iterator

import pytest

from tests.helpers.requirements import require
from tests.helpers.stack import REPO_ROOT

CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "slurm_cluster.sh"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """Start the one-node cluster (installing Slurm when root and it is missing); stop it after the session if we
    started it."""
    require(os.geteuid() == 0 or shutil.which("sbatch") is not None,
            "Slurm is not installed and installing it needs root")
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


