"""VllmHttpGeneration's gloo weight transport against stand-in replicas (weight_transport_fakes.FakeReplica: the real
gloo engine and wire, a small model, vLLM's routes): what each replica is asked and when, that only the apply is
paused, that the tensors land whole, and every way a push fails. test_weight_transport_gloo_vllm.py proves the same
against a real vLLM."""

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
import pytest
import torch

from nemo_gym.experience.errors import WeightUpdateError
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.weight_source import ModuleWeights, TensorMeta
from tests.experience.generation_support import LoopbackServer
from tests.experience.weight_transport_fakes import FakeReplica, TinyModel, recorded_rendezvous, same_weights

CONFIG = {"model_name": "m", "max_new_tokens": 4, "max_seq_len": 32, "pad_token_id": 0}
FIRST_PUSH = ["/get_world_size", "/init_weight_transfer_engine"]
PUSH = ["/start_weight_update", "/update_weights", "/finish_weight_update",  # arm the receive, unpaused
        "/pause", "/start_weight_update", "/update_weights", "/finish_weight_update",  # apply, paused
        "/reset_prefix_cache", "/resume", "/weight_info"]




class StopsAfter:
    """The trainer's model as a WeightSource whose iteration raises after `k` tensors (a trainer-side failure)."""

    def __init__(self, model: torch.nn.Module, k: int) -> None:
        self.weights, self.k = ModuleWeights(model), k

    def metadata(self) -> list[TensorMeta]:
        return self.weights.metadata()

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for i, item in enumerate(self.weights):
            if i == self.k:
                raise RuntimeError("the trainer's gather failed")
            yield item


def test_every_replica_takes_the_pushed_tensors_and_is_paused_only_to_apply_them() -> None:
    trainer = TinyModel(seed=1)
    replicas = [FakeReplica(), FakeReplica()]
    with LoopbackServer(replicas[0]) as a, LoopbackServer(replicas[1]) as b, \
            VllmHttpGeneration(CONFIG, [a.base_url, b.base_url], weight_version=3,
                               weight_transport="gloo") as backend:
        backend.update_weights(trainer, 4)
        assert backend.weight_version == 4
        for replica in replicas:
            assert same_weights(replica.model, trainer) and replica.label == "4" and not replica.paused
        with torch.no_grad():
            trainer.layers[1].weight.mul_(2)
        backend.update_weights(trainer, 5)  # the groups are kept: no second rendezvous
        steps = backend.last_weight_update[a.root]
    for stub, replica in zip((a, b), replicas):
        assert stub.paths() == FIRST_PUSH + PUSH + PUSH
        assert same_weights(replica.model, trainer) and replica.label == "5"
        receive, apply = stub.requests[3]["body"]["update_info"], stub.requests[7]["body"]["update_info"]
        assert receive["phase"] == "receive" and receive["names"][:2] == ["layers.0.weight", "layers.0.bias"]
        assert receive["dtype_names"][0] == "float32" and receive["shapes"][0] == [64, 64]
        assert apply == {"phase": "apply"} and stub.requests[8]["body"] == {"weight_version": "4"}
        assert stub.requests[4]["body"] == {}  # the arm's session ends without a version
    assert {"broadcast", "apply", "pause", "resume"} <= steps.keys() and "init_weight_transfer_engine" not in steps


def test_a_broadcast_that_breaks_leaves_the_replica_unpaused_on_its_old_weights_and_the_next_push_reconnects() -> None:
    replica = FakeReplica()
    before = TinyModel()
    trainer = TinyModel(seed=1)
    with LoopbackServer(replica) as stub, \
            VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo", weight_update_timeout_s=60) as backend:
        with pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(StopsAfter(trainer, 3), 1)
        assert backend.weight_version == 0
        assert "transfer at broadcast: RuntimeError: the trainer's gather failed" in failure.value.failed[stub.root]
        assert "/pause" not in stub.paths() and same_weights(replica.model, before) and replica.label == "0"
        backend.update_weights(trainer, 1)
    assert stub.paths() == FIRST_PUSH + PUSH[:3] + FIRST_PUSH + PUSH
    assert same_weights(replica.model, trainer) and backend.weight_version == 1


def test_a_source_that_disagrees_with_its_metadata_is_refused_before_the_first_tensor() -> None:
    class Lying(ModuleWeights):
        def metadata(self) -> list[TensorMeta]:
            metas = super().metadata()
            return [TensorMeta(metas[0].name, torch.float16, metas[0].shape), *metas[1:]]

    replica = FakeReplica()
    with LoopbackServer(replica) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo",
                                                             weight_update_timeout_s=60) as backend:
        with pytest.raises(WeightUpdateError, match=r"invalid_weights at broadcast: ValueError: .*'layers.0.weight' "
                                                    r"float32 \(64, 64\), but its metadata declared .* float16"):
            backend.update_weights(Lying(TinyModel(seed=1)), 1)
    assert "/pause" not in stub.paths() and same_weights(replica.model, TinyModel())


def test_a_replica_that_fails_is_named_and_the_others_take_the_version() -> None:
    good, bad = FakeReplica(), FakeReplica(fail={"/init_weight_transfer_engine": (500, "no engine")})
    trainer = TinyModel(seed=1)
    with LoopbackServer(good) as a, LoopbackServer(bad) as b, \
            VllmHttpGeneration(CONFIG, [a.base_url, b.base_url], weight_transport="gloo") as backend:
        with pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(trainer, 1)
        assert backend.weight_version == 0
    error = failure.value
    assert error.updated == [a.root] and list(error.failed) == [b.root]
    assert error.failed[b.root].startswith("http_5xx at init_weight_transfer_engine") and "no engine" in str(error)
    assert same_weights(good.model, trainer) and good.label == "1" and not same_weights(bad.model, trainer)


def test_a_rendezvous_the_replica_never_joins_ends_when_the_push_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the workers' arrival keys, the trainer's side of the group waited for gloo's timeout (300 s here), a
    # thread and a listening store left behind by every failed push.
    rendezvous = recorded_rendezvous(monkeypatch)
    with LoopbackServer(FakeReplica(fail={"/init_weight_transfer_engine": (500, "no engine")})) as stub, \
            VllmHttpGeneration(CONFIG, [stub.base_url], weight_transport="gloo") as backend:
        with pytest.raises(WeightUpdateError, match="http_5xx at init_weight_transfer_engine"):
            backend.update_weights(TinyModel(seed=1), 1)
    for thread in rendezvous:
        thread.join(timeout=60)
    assert len(rendezvous) == 1 and not rendezvous[0].is_alive()


@pytest.mark.parametrize("fail, left_paused", [("no receive was armed (the model is unchanged)", False),
                                               ("the model is left incomplete: loading failed", True)])
def test_an_apply_that_fails_is_resumed_unless_the_model_is_left_incomplete(fail: str, left_paused: bool) -> None:
    replica = FakeReplica(fail={"apply": (500, fail)})
    with LoopbackServer(replica) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo") as backend:
        with pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(TinyModel(seed=1), 1)
    reason = failure.value.failed[stub.root]
    assert reason.startswith("http_5xx at apply") and fail in reason
    assert replica.paused == left_paused and ("left paused" in reason) == left_paused
    assert stub.paths()[-1] == ("/update_weights" if left_paused else "/resume")


def test_a_load_the_model_refuses_leaves_the_replica_paused_and_its_engine_refuses_later_pushes() -> None:
    class WithAnUnknownTensor(ModuleWeights):
        def metadata(self) -> list[TensorMeta]:
            return [*super().metadata(), TensorMeta("layers.9.weight", torch.float32, (2,))]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            yield from super().__iter__()
            yield "layers.9.weight", torch.zeros(2)

    replica = FakeReplica()
    with LoopbackServer(replica) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="gloo") as backend:
        with pytest.raises(WeightUpdateError, match="the model is left incomplete.*KeyError.*left paused rather "
                                                    "than serve a half-loaded model: restart it"):
            backend.update_weights(WithAnUnknownTensor(TinyModel(seed=1)), 1)
        assert replica.paused and "/resume" not in stub.paths()
        with pytest.raises(WeightUpdateError, match="the model is left incomplete since an earlier update"):
            backend.update_weights(TinyModel(seed=1), 2)


def test_the_transport_and_the_weights_must_agree(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="weight_transport must be one of"):
        VllmHttpGeneration(CONFIG, "http://127.0.0.1:1/v1", weight_transport="shm")
    with VllmHttpGeneration(CONFIG, "http://127.0.0.1:1/v1") as disk, \
            pytest.raises(TypeError, match="weight_transport='disk' loads a weights folder.*not TinyModel"):
        disk.update_weights(TinyModel(), 1)
    with VllmHttpGeneration(CONFIG, "http://127.0.0.1:1/v1", weight_transport="gloo") as gloo:
        with pytest.raises(TypeError, match="pass the model .* not a folder"):
            gloo.update_weights(tmp_path, 1)
        with pytest.raises(TypeError, match="a torch.nn.Module or a WeightSource .* not dict"):
            gloo.update_weights({"w": torch.zeros(1)}, 1)  # type: ignore[arg-type]


def test_nccl_without_a_cuda_device_is_a_typed_error_naming_the_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU machine too (tests marked gpu use CUDA)
    replica = FakeReplica()
    with LoopbackServer(replica) as stub, VllmHttpGeneration(CONFIG, stub.base_url, weight_transport="nccl") as backend:
        with pytest.raises(WeightUpdateError, match="transfer at init_weight_transfer_engine: RuntimeError: the nccl "
                                                    "weight transport needs a CUDA device"):
            backend.update_weights(TinyModel(seed=1), 1)
    assert stub.paths() == ["/get_world_size"]


def test_a_transfer_thread_that_ends_after_its_loop_closed_raises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # A rendezvous with a replica that never joins blocks its thread until the group's timeout, long after the push
    # (and its event loop) gave up: the thread's result then has nowhere to go, and must not raise in the thread.
    from nemo_gym.experience.generation.vllm_collective import _in_thread

    release, thread_errors = threading.Event(), []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)

    async def give_up() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_in_thread(lambda: release.wait() and 1), timeout=0.01)

    before = set(threading.enumerate())
    asyncio.run(give_up())  # the loop is closed when this returns
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "nemo_gym-weight-transfer"]
    release.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and thread_errors == []
