"""nccl_lib and the trainer's NCCL group on any machine: a missing libnccl and a malformed unique id are clear errors
before any NCCL call, and, with a fake libnccl injected in place of the ctypes one (nccl_fakes.FakeNccl), the logic
that keeps a communicator from hanging: the init is non-blocking and bounded, a failure aborts (never destroys),
and close() or abort() from another thread ends a join or a wait at once. The real calls run in the gpu-marked
test_weight_transport_nccl_gpu.py."""

import threading
from collections.abc import Callable

import pytest
import torch

from nemo_gym.experience.generation import nccl_lib
from nemo_gym.experience.generation.nccl_wire import NcclTrainerGroup
from tests.experience.nccl_fakes import (
    HANDLE,
    REMOTE_ERROR,
    SUCCESS,
    UNHANDLED_CUDA_ERROR,
    FakeNccl,
    cuda_without_a_gpu,
)

UID = bytes(nccl_lib.UNIQUE_ID_BYTES)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNccl:
    fake = FakeNccl()
    monkeypatch.setattr(nccl_lib, "_lib", lambda: fake)
    return fake


def in_thread(function: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Run `function()` in a thread of its own; the list gets what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            function()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def test_no_libnccl_is_an_error_naming_every_place_looked(monkeypatch: pytest.MonkeyPatch) -> None:
    nccl_lib._lib.cache_clear()
    monkeypatch.setattr(nccl_lib, "_candidates", lambda: ["/nonexistent/libnccl.so.2"])
    try:
        with pytest.raises(nccl_lib.NcclError, match="no libnccl could be loaded.*/nonexistent/libnccl.so.2"):
            nccl_lib.unique_id()
    finally:
        nccl_lib._lib.cache_clear()


def test_a_unique_id_of_the_wrong_size_is_refused_before_nccl_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_lib, "_lib", lambda: pytest.fail("libnccl loaded for a malformed id"))
    with pytest.raises(nccl_lib.NcclError, match="128 bytes, not 5"):
        nccl_lib.NcclCommunicator(2, b"short", 0)


def test_the_communicator_is_non_blocking_and_a_join_nobody_answers_is_aborted_at_its_timeout(
        fake: FakeNccl) -> None:
    comm = nccl_lib.NcclCommunicator(2, UID, 0)  # returns at once: the init goes on in NCCL
    # ncclConfig_t as NCCL 2.14 declared it (NCCL_CONFIG_INITIALIZER's magic), blocking off.
    assert fake.config == {"size": 20, "magic": 0xCAFEBEEF, "version": 21400, "blocking": 0}
    with pytest.raises(nccl_lib.NcclError, match="not every rank joined the NCCL communicator in 0.05 s"):
        comm.join(0.05)
    assert fake.aborted == [HANDLE]
    comm.abort()  # already aborted: nothing more reaches NCCL
    assert fake.aborted == [HANDLE]


def test_an_init_that_fails_is_aborted_and_named(fake: FakeNccl) -> None:
    fake.state = REMOTE_ERROR
    with pytest.raises(nccl_lib.NcclError, match=r"ncclCommInitRankConfig failed: fake error 6 \(6\)"):
        nccl_lib.NcclCommunicator(2, UID, 0).join(60)
    assert fake.aborted == [HANDLE]


def test_a_failed_collective_aborts_the_communicator(fake: FakeNccl, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_without_a_gpu(monkeypatch)
    fake.state = SUCCESS
    comm = nccl_lib.NcclCommunicator(2, UID, 0)
    comm.join(60)
    fake.broadcast_result = UNHANDLED_CUDA_ERROR
    with pytest.raises(nccl_lib.NcclError, match=r"ncclBroadcast failed: fake error 1"):
        comm.broadcast(torch.zeros(4), root=0)
    assert fake.aborted == [HANDLE]
    with pytest.raises(nccl_lib.NcclError, match="was aborted"):
        comm.broadcast(torch.zeros(4), root=0)


def test_an_error_reported_while_waiting_for_the_collectives_aborts_the_communicator(fake: FakeNccl) -> None:
    fake.state = SUCCESS
    comm = nccl_lib.NcclCommunicator(2, UID, 0)
    comm.join(60)
    fake.state = REMOTE_ERROR  # e.g. the peer's process died mid-broadcast
    with pytest.raises(nccl_lib.NcclError, match="an NCCL collective failed: fake error 6"):
        comm.wait(lambda: False)
    assert fake.aborted == [HANDLE]


def test_abort_from_another_thread_ends_a_wait_on_a_stalled_collective(fake: FakeNccl) -> None:
    fake.state = SUCCESS
    comm = nccl_lib.NcclCommunicator(2, UID, 0)
    comm.join(60)
    fake.polled.clear()
    waiting, raised = in_thread(lambda: comm.wait(lambda: False))  # a broadcast whose peer never receives
    assert fake.polled.wait(30)
    comm.abort()
    waiting.join(timeout=30)
    assert not waiting.is_alive() and fake.aborted == [HANDLE]
    assert len(raised) == 1 and "was aborted" in str(raised[0])


@pytest.mark.parametrize("close_first", [False, True])
def test_close_ends_a_connect_at_once_whether_it_is_joining_or_not_started(
        fake: FakeNccl, monkeypatch: pytest.MonkeyPatch, close_first: bool) -> None:
    # Before, the group's close() did nothing until the join was over, and a join waited for its peers for ever.
    cuda_without_a_gpu(monkeypatch)
    group = NcclTrainerGroup(2, timeout_s=600)
    if close_first:
        group.close()
    connecting, raised = in_thread(group.connect)
    if not close_first:
        assert fake.polled.wait(30)  # joining: the init is in progress, and stays so
        group.close()
    connecting.join(timeout=30)
    assert not connecting.is_alive() and fake.aborted == [HANDLE]
    assert len(raised) == 1 and isinstance(raised[0], nccl_lib.NcclError)
    assert ("was closed" if close_first else "was aborted") in str(raised[0])


def test_work_that_ends_because_of_an_abort_is_no_success(fake: FakeNccl) -> None:
    # An aborted broadcast's kernel exits, so its CUDA event completes: the wait must still fail.
    fake.state = SUCCESS
    comm = nccl_lib.NcclCommunicator(2, UID, 0)
    comm.join(60)
    comm.abort()
    with pytest.raises(nccl_lib.NcclError, match="was aborted"):
        comm.wait(lambda: True)
