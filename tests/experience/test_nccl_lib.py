"""nccl_lib on any machine: a missing libnccl and a malformed unique id are clear errors before any NCCL call (the
calls themselves run in the gpu-marked test_weight_transport_nccl_gpu.py)."""

import pytest

from nemo_gym.experience.generation import nccl_lib


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
