"""Every process of the stack takes the open-file limit it may: at 1,024 rollouts in flight a server holds more
sockets than the usual soft limit of 1,024."""

import resource
import subprocess
import sys

import pytest

CHILD = """
import resource
from nemo_gym.http_client import HttpClient
HttpClient()
print(*resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_making_a_client_raises_the_soft_open_files_limit_to_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.fail(f"this machine's hard open-files limit ({hard}) leaves nothing to raise: the test needs > 256")

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True,
                         preexec_fn=low_soft_limit, timeout=60).stdout.split()
    assert [int(x) for x in out] == [hard, hard]
