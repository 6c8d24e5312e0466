"""One test session at a time holds the machine's Slurm cluster: a second session waits instead of stopping the
cluster under the first one's jobs or restarting it with a clean slate that forgets them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.stack import REPO_ROOT
from tests.slurm import util

HOLDER = "import sys\nfrom tests.slurm.util import cluster_lock\nwith cluster_lock(0) as held:\n" \
         "    print(held, flush=True)\n    sys.stdin.read()\n"


def test_a_second_session_waits_for_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "slurm_state"
    monkeypatch.setattr(util, "CLUSTER_LOCK", state.with_suffix(".lock"))
    env = {**os.environ, "NG_SLURM_STATE_DIR": str(state), "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "True\n"  # the first session holds the cluster
        with util.cluster_lock(0) as held:
            assert not held  # a second one does not get it while the first holds it
    finally:
        holder.stdin.close()  # the first session ends
        holder.wait(timeout=30)
    with util.cluster_lock(30) as held:
        assert held
