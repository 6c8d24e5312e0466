"""A server serves with the garbage collector's serving thresholds (server.gc_pace) and gives the previous ones
back when it stops."""

import gc

from starlette.testclient import TestClient

from nemo_gym.server.gc_pace import SERVING_THRESHOLDS
from tests.servers.test_direct_dispatch import Probe


def test_a_serving_server_collects_young_objects_less_often_and_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    assert before != SERVING_THRESHOLDS
    with TestClient(Probe().app()) as client:
        assert client.get("/health").json()["status"] == "ok"
        assert gc.get_threshold() == SERVING_THRESHOLDS
    assert gc.get_threshold() == before
