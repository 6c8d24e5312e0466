"""VllmHttpGeneration's weight updates against loopback stubs of the test's own: the calls each replica gets, and
every way an update fails (fault injection). tests/experience/test_weight_updates_vllm.py proves the same against a
real vLLM."""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.errors import (
    GenerationError,
    ReplicaPausedError,
    UnsupportedBackendError,
    WeightUpdateError,
)
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.interfaces import implements
from nemo_gym.experience.generation.vllm_refit import LEFT_PAUSED
from tests.experience.collector_fakes import ScriptedRolloutManager, master_config
from tests.experience.generation_support import FakeVllm, LoopbackServer, make_batch
from tests.experience.scripted import ScriptedGeneration

CONFIG = {"model_name": "m", "max_new_tokens": 4, "max_seq_len": 32, "pad_token_id": 0}
UPDATE_CALLS = ["/pause", "/collective_rpc", "/update_weight_version", "/reset_prefix_cache", "/resume", "/weight_info"]




def test_each_replica_is_paused_keep_reloaded_relabelled_resumed_and_checked(weights: Path) -> None:
    with LoopbackServer(FakeVllm()) as a, LoopbackServer(FakeVllm()) as b:
        with VllmHttpGeneration(CONFIG, [a.base_url, b.base_url], weight_version=4) as backend:
            assert backend.weight_version == 4
            backend.update_weights(weights, 5)
            assert backend.weight_version == 5
    for stub in (a, b):
        assert stub.paths() == UPDATE_CALLS
        pause, reload, label = stub.requests[:3]
        assert pause["query"] == {"mode": "keep"}
        assert reload["body"] == {"method": "reload_weights", "kwargs": {"weights_path": str(weights.resolve())}}
        assert label["body"] == {"new_version": "5"}


def test_a_replica_without_dev_mode_says_how_to_start_it(weights: Path) -> None:
    with LoopbackServer(FakeVllm(fail={"/pause": (404, {"detail": "Not Found"})})) as stub:
        with VllmHttpGeneration(CONFIG, stub.base_url) as backend, pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(weights, 1)
        assert backend.weight_version == 0
    root = stub.base_url.removesuffix("/v1")
    assert "http_4xx at pause" in failure.value.failed[root] and "VLLM_SERVER_DEV_MODE=1" in str(failure.value)
    assert stub.paths() == ["/pause"]  # refused, so nothing was paused: no /resume to send


def test_a_failed_load_is_named_leaves_that_replica_paused_and_the_version(weights: Path) -> None:
    # vLLM reloads in place: after a failed reload the model may be part new, and must not serve.
    broken = FakeVllm(fail={"/collective_rpc": (500, {"error": "Worker failed"})})
    with LoopbackServer(FakeVllm()) as good, LoopbackServer(broken) as bad:
        with VllmHttpGeneration(CONFIG, [good.base_url, bad.base_url], weight_version=2) as backend:
            with pytest.raises(ReplicaPausedError) as failure:
                backend.update_weights(weights, 3)
            assert backend.weight_version == 2
    error, good_root, bad_root = failure.value, good.base_url[:-3], bad.base_url[:-3]
    assert (error.version, error.served_version, error.updated) == (3, 2, [good_root])
    assert list(error.failed) == [bad_root] and error.failed[bad_root].startswith("http_5xx at reload_weights")
    assert error.failed[bad_root].endswith(LEFT_PAUSED) and error.paused == {bad_root: "reload_weights"}
    assert f"Took version 3: {good_root}" in str(error) and "weight_version stays 2" in str(error)
    assert f"left paused: {bad_root} at reload_weights" in str(error)
    assert bad.paths() == ["/pause", "/collective_rpc"] and broken.label == "default"


@pytest.mark.parametrize("hangs, step, left", [("/pause", "pause", "serving its old weights"),
                                               ("/collective_rpc", "reload_weights", LEFT_PAUSED)])
def test_a_hung_call_is_a_timeout_within_the_bound_and_the_replica_resumed_only_on_whole_weights(
        weights: Path, hangs: str, step: str, left: str) -> None:
    with LoopbackServer(FakeVllm(hang=hangs)) as stub:
        with VllmHttpGeneration(CONFIG, stub.base_url, weight_update_timeout_s=1.0) as backend:
            started = time.monotonic()
            with pytest.raises(WeightUpdateError) as failure:
                backend.update_weights(weights, 1)
            assert time.monotonic() - started < 10
            assert backend.weight_version == 0
    reason = failure.value.failed[stub.base_url[:-3]]
    assert reason.startswith(f"timeout at {step}") and reason.endswith(left)
    # A pause that timed out may still have landed: resumed. A reload that timed out may still be running: not.
    assert stub.paths()[-1] == ("/resume" if hangs == "/pause" else "/collective_rpc")


def test_a_failure_after_the_load_resumes_the_replica_on_the_new_weights_and_says_so(weights: Path) -> None:
    vllm = FakeVllm(fail={"/reset_prefix_cache": (500, {"error": "engine busy"})})
    with LoopbackServer(vllm) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_version=1) as backend:
        with pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(weights, 2)
        assert backend.weight_version == 1
    reason = failure.value.failed[stub.base_url[:-3]]
    assert not isinstance(failure.value, ReplicaPausedError)
    assert reason.startswith("http_5xx at reset_prefix_cache") and reason.endswith("; serving the new weights")
    assert stub.paths() == UPDATE_CALLS[:-1] and vllm.label == "2"  # whole new weights, labelled, resumed


def test_a_replica_that_reports_another_version_is_a_failure(weights: Path) -> None:
    with LoopbackServer(FakeVllm(reported="default")) as stub:
        with VllmHttpGeneration(CONFIG, stub.base_url) as backend, pytest.raises(WeightUpdateError,
                                                                               match="version_mismatch"):
            backend.update_weights(weights, 1)
        assert backend.weight_version == 0


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_bad_folder_touches_no_replica(weights: Path, damage: str) -> None:
    folder = weights.parent / "nowhere"
    if damage == "truncated":
        folder = weights
        (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-3])
    with LoopbackServer(FakeVllm()) as stub, VllmHttpGeneration(CONFIG, stub.base_url) as backend:
        with pytest.raises(WeightUpdateError, match="invalid_weights: .*no replica was touched"):
            backend.update_weights(folder, 1)
    assert stub.requests == []


def test_a_generation_spanning_an_update_reports_both_versions(weights: Path) -> None:
    release = threading.Event()
    vllm = FakeVllm()

    async def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if path == "/v1/completions":
            if body["prompt"] == [1, 2]:  # the long generation: answers once the test lets it
                await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
            return 200, orjson.dumps({"choices": [{"token_ids": [5], "logprobs": {"token_logprobs": [-0.1]},
                                                   "finish_reason": "stop"}]})
        return await vllm(path, body)

    with LoopbackServer(handler) as stub, VllmHttpGeneration(CONFIG, stub.base_url) as backend, \
            ThreadPoolExecutor(1) as pool:
        running = pool.submit(backend.generate, make_batch([[1, 2]], pad_token_id=0))
        while "/v1/completions" not in stub.paths():  # the request has reached the server
            time.sleep(0.01)
        backend.update_weights(weights, 1)
        assert not running.done()
        release.set()
        assert running.result(timeout=30)["weight_versions"] == [(0, 1)]
        assert backend.generate(make_batch([[3]], pad_token_id=0))["weight_versions"] == [(1,)]


def test_invalidate_kv_cache_preempts_running_requests_on_every_replica() -> None:
    refusing = FakeVllm(fail={"/reset_prefix_cache": (200, {"success": False})})
    with LoopbackServer(FakeVllm()) as a, LoopbackServer(FakeVllm()) as b, LoopbackServer(refusing) as c:
        with VllmHttpGeneration(CONFIG, [a.base_url, b.base_url]) as backend:
            assert backend.invalidate_kv_cache() is True
        with VllmHttpGeneration(CONFIG, [a.base_url, c.base_url]) as backend:
            assert backend.invalidate_kv_cache() is False
    for stub in (a, b, c):
        assert stub.requests[0]["path"] == "/reset_prefix_cache"
        assert stub.requests[0]["query"] == {"reset_running_requests": "true"}


def test_invalidate_kv_cache_names_an_unreachable_replica() -> None:
    with LoopbackServer(FakeVllm(fail={"/reset_prefix_cache": (503, {"error": "down"})})) as stub:
        with VllmHttpGeneration(CONFIG, stub.base_url) as backend, pytest.raises(GenerationError) as failure:
            backend.invalidate_kv_cache()
    assert stub.base_url[:-3] in str(failure.value) and "(http_5xx)" in str(failure.value)


def test_a_backend_without_weight_updates_says_what_to_implement(tmp_path: Path) -> None:
    backend = ScriptedGeneration(lambda prompt: [1])
    assert backend.weight_version == 0
    with pytest.raises(UnsupportedBackendError, match="implement update_weights"):
        backend.update_weights(tmp_path, 1)
    with pytest.raises(UnsupportedBackendError, match="implement it"):
        backend.invalidate_kv_cache()
    assert not implements(backend, "invalidate_kv_cache")
    assert implements(VllmHttpGeneration(CONFIG, "http://127.0.0.1:1/v1"), "invalidate_kv_cache")
    config = master_config(2, 1, in_flight_weight_updates=True, recompute_kv_cache_after_weight_updates=True)
    with pytest.raises(ValueError, match="invalidate_kv_cache"):
        AsyncTrajectoryCollector(backend, None, {}, config, ReplayBuffer(4), rollout_manager=ScriptedRolloutManager())


def test_a_refit_whose_kv_invalidation_fails_stays_paused_with_a_typed_error() -> None:
    class Refusing(ScriptedGeneration):
        def invalidate_kv_cache(self) -> bool:
            return False

    config = master_config(2, 1, in_flight_weight_updates=True, recompute_kv_cache_after_weight_updates=True)
    collector = AsyncTrajectoryCollector(Refusing(lambda prompt: [1]), None, {}, config, ReplayBuffer(4),
                                         rollout_manager=ScriptedRolloutManager())
    collector.prepare_for_refit()
    with pytest.raises(GenerationError, match="invalidate_kv_cache\\(\\) reported failure"):
        collector.resume_after_refit()
    assert collector._refit_paused
