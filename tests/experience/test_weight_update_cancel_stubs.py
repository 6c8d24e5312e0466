"""A weight update cancelled (Ctrl-C) at a chosen step, against stub replicas: each replica is resumed only on whole
weights (its old ones, or the new ones once loaded), one whose load had begun stays paused with its version
unchanged, and the trainer gets a typed error saying which. The cancel lands by construction: the stub holds the
chosen endpoint until the test releases it, and SIGINT goes to the main thread once that request has arrived."""

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.experience.errors import ReplicaPausedError, WeightUpdateError
from nemo_gym.experience.generation import VllmHttpGeneration, nccl_lib
from nemo_gym.experience.generation.gloo_wire import TrainerGroup
from nemo_gym.experience.generation.vllm_refit import LEFT_PAUSED
from tests.experience.generation_support import FakeVllm, Handler, LoopbackServer
from tests.experience.nccl_fakes import HANDLE, FakeNccl, cuda_without_a_gpu
from tests.experience.weight_transport_fakes import FakeReplica, TinyModel, recorded_rendezvous, same_weights

CONFIG = {"model_name": "m", "max_new_tokens": 4, "max_seq_len": 32, "pad_token_id": 0}


class Held:
    """A stub replica that holds requests to `path` (or the gloo apply, "apply"): `reached` is set once one has
    arrived, and it is answered 503, never passed on, once `release` is set (its client has given up by then)."""

    def __init__(self, replica: Handler, path: str) -> None:
        self.replica, self.path = replica, path
        self.reached, self.release = threading.Event(), threading.Event()

    async def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        apply = path == "/update_weights" and body.get("update_info", {}).get("phase") == "apply"
        if ("apply" if apply else path) != self.path:
            return await self.replica(path, body)
        self.reached.set()
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return 503, b"{}"


@contextmanager
def ctrl_c_at(held: Held) -> Iterator[None]:
    """Ctrl-C to the main thread (this test's, waiting in update_weights) once `held` has a request."""
    main = threading.main_thread().ident
    assert main == threading.get_ident()

    def interrupt() -> None:
        if held.reached.wait(60):
            signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        yield
    finally:
        held.release.set()





@pytest.mark.parametrize("held_path, step, calls, left", [
    # Paused, nothing loaded yet: resumed on the old weights.
    ("/pause", "pause", ["/pause", "/resume"], "serving its old weights"),
    # Mid-reload: the model may be part new, so it is not resumed.
    ("/collective_rpc", "reload_weights", ["/pause", "/collective_rpc"], LEFT_PAUSED),
    # The reload is complete: resumed on the new weights.
    ("/update_weight_version", "update_weight_version",
     ["/pause", "/collective_rpc", "/update_weight_version", "/resume"], "serving the new weights"),
])
def test_ctrl_c_resumes_a_replica_only_on_whole_weights(weights: Path, held_path: str, step: str, calls: list[str],
                                                         left: str) -> None:
    vllm = FakeVllm()
    held = Held(vllm, held_path)
    with LoopbackServer(held) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_version=2) as backend:
        with ctrl_c_at(held), pytest.raises(KeyboardInterrupt) as interrupted:
            backend.update_weights(weights, 3)
        assert backend.weight_version == 2
        assert stub.paths() == calls  # the clean-up is over when update_weights raises
    error = interrupted.value.__cause__
    assert isinstance(error, WeightUpdateError) and error.updated == [] and error.served_version == 2
    assert error.failed == {stub.root: f"interrupted (KeyboardInterrupt); cancelled at {step}; {left}"}
    assert isinstance(error, ReplicaPausedError) == (left == LEFT_PAUSED)
    if left == LEFT_PAUSED:
        assert error.paused == {stub.root: step} and vllm.label == "default"  # paused, its version unchanged


def test_ctrl_c_during_the_gloo_apply_leaves_the_replica_paused_and_drops_its_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[TrainerGroup] = []
    close = TrainerGroup.close

    def recorded_close(group: TrainerGroup) -> None:
        closed.append(group)
        close(group)

    monkeypatch.setattr(TrainerGroup, "close", recorded_close)
    replica = FakeReplica()
    held = Held(replica, "apply")
    with LoopbackServer(held) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo") as backend:
        with ctrl_c_at(held), pytest.raises(KeyboardInterrupt) as interrupted:
            backend.update_weights(TinyModel(seed=1), 1)
        assert len(closed) == 1  # dropped by the cancelled push, before shutdown closes what is left
        assert backend.weight_version == 0 and replica.paused and stub.paths()[-1] == "/update_weights"
    error = interrupted.value.__cause__
    assert isinstance(error, ReplicaPausedError) and error.paused == {stub.root: "apply"}
    assert error.failed[stub.root].endswith(f"cancelled at apply; {LEFT_PAUSED}")


def test_ctrl_c_during_the_gloo_rendezvous_ends_the_trainers_wait_and_pauses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rendezvous = recorded_rendezvous(monkeypatch)
    replica = FakeReplica()
    held = Held(replica, "/init_weight_transfer_engine")
    with LoopbackServer(held) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo",
                                                          weight_update_timeout_s=300) as backend:
        with ctrl_c_at(held), pytest.raises(KeyboardInterrupt) as interrupted:
            backend.update_weights(TinyModel(seed=1), 1)
        (thread,) = rendezvous
        thread.join(timeout=30)  # without the group closed, it would wait for the workers for 300 s
        assert not thread.is_alive()
    error = interrupted.value.__cause__
    assert type(error) is WeightUpdateError
    assert error.failed[stub.root].endswith("cancelled at init_weight_transfer_engine; serving its old weights")
    assert "/pause" not in stub.paths() and same_weights(replica.model, TinyModel())


def test_ctrl_c_during_the_nccl_rendezvous_aborts_the_communicator_being_set_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNccl()  # every rank's join stays in progress
    monkeypatch.setattr(nccl_lib, "_lib", lambda: fake)
    cuda_without_a_gpu(monkeypatch)
    held = Held(FakeReplica(), "/init_weight_transfer_engine")
    with LoopbackServer(held) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="nccl",
                                                          weight_update_timeout_s=300) as backend:
        with ctrl_c_at(held), pytest.raises(KeyboardInterrupt) as interrupted:
            backend.update_weights(TinyModel(seed=1), 1)
        assert fake.aborted == [HANDLE]  # without it, the trainer's join would wait out its 300 s
    error = interrupted.value.__cause__
    assert isinstance(error, WeightUpdateError)
    assert error.failed[stub.root].endswith("cancelled at init_weight_transfer_engine; serving its old weights")
