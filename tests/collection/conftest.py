"""One real `ng_run` stack for the whole folder: several instances of the fault-injecting test agent.

Faults that tests switch off are tied to marker files under `markers/`: a fault happens only while its file exists.
"""

from pathlib import Path
from typing import Iterator

import pytest

from tests.collection.util import stack_config
from tests.helpers.stack import Stack, running_stack


class CollectionStack:
    def __init__(self, stack: Stack, workdir: Path) -> None:
        self.stack = stack
        self.workdir = workdir
        self.head_port = stack.head_url.rsplit(":", 1)[1]

    def marker(self, name: str) -> Path:
        return self.workdir / "markers" / name

    def args(self, *extra: str) -> list[str]:
        return [f"+head_server.port={self.head_port}", *extra]


AGENTS = {
    "agent_a": {},
    "agent_b": {},
    "slow_agent": {"delay_s": 0.03},
    "flaky_500": {"fault": "500", "fault_fraction": 0.3, "fault_while_file": "markers/flaky_500"},
    "flaky_reset": {"fault": "reset", "fault_fraction": 0.3, "fault_while_file": "markers/flaky_reset"},
    "flaky_hang": {"fault": "hang", "fault_fraction": 0.2, "hang_s": 5, "fault_while_file": "markers/flaky_hang"},
    "flaky_downstream": {"fault": "502_timeout", "fault_fraction": 0.3, "fault_while_file": "markers/flaky_downstream"},
    "bad_request": {"fault": "400", "fault_fraction": 0.3, "fault_while_file": "markers/bad_request"},
    "invalid_reply": {"fault": "invalid", "fault_fraction": 0.3, "fault_while_file": "markers/invalid_reply"},
    "always_500": {"fault": "500"},
    "usage_agent": {"report_usage": True},
    "paced_agent": {"delay_s": 0.5},  # rollouts of a known length, for the drain before a deadline
    "stuck_agent": {"fault": "hang", "hang_s": 120},  # no rollout finishes before a short deadline
}


@pytest.fixture(scope="session")
def collection_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectionStack]:
    workdir = tmp_path_factory.mktemp("collection_stack")
    (workdir / "markers").mkdir()
    agents = {
        name: {k: (str(workdir / v) if k == "fault_while_file" else v) for k, v in settings.items()}
        for name, settings in AGENTS.items()
    }
    config = stack_config(workdir / "agents.yaml", agents)
    with running_stack([f"+config_paths=[{config}]"], cwd=workdir) as stack:
        yield CollectionStack(stack, workdir)
