"""The gloo weight transport into a real vLLM (the session's, float32, started with our engine): a push changes what
it serves and the bundled weights pushed back restore it token for token; a replica that fails is named while the
real one takes the version; and a trainer process that SIGKILLs itself in the middle of its broadcast leaves vLLM
serving the old weights, unpaused, with its old version, ready for the next trainer."""

import subprocess
import sys
from typing import Any, Iterator

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from nemo_gym.experience.errors import WeightUpdateError
from nemo_gym.experience.generation import VllmHttpGeneration
from tests.experience.generation_support import LoopbackServer, chat_prompt, generated_part, make_batch
from tests.experience.weight_transport_fakes import FakeReplica
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
QUESTIONS = ("What is 2 + 3?", "What is the capital of France?")
KILLED_AFTER = 100  # of the bundled model's 272 tensors

# A trainer in a process of its own: it pushes the changed weights over gloo and SIGKILLs itself when its
# broadcast asks for tensor KILLED_AFTER, the earlier ones sent.
TRAINER = f"""
import os, signal, sys
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.weight_source import ModuleWeights
from tests.experience.test_weight_transport_gloo_vllm import changed_model, config_for

class KilledMidBroadcast(ModuleWeights):
    def __iter__(self):
        for i, item in enumerate(super().__iter__()):
            if i == {KILLED_AFTER}:
                print(f"sent {{i}} of {{len(self.metadata())}}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            yield item

base_url, model_name = sys.argv[1:]
with VllmHttpGeneration(config_for(model_name), base_url, weight_transport="gloo") as trainer:
    trainer.update_weights(KilledMidBroadcast(changed_model()), 1)
"""


def config_for(model_name: str) -> dict[str, Any]:
    return {"model_name": model_name, "max_new_tokens": 16, "max_seq_len": 2048, "pad_token_id": TOKENIZER.pad_token_id}


def original_model() -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)


def changed_model() -> PreTrainedModel:
    """The bundled model with the MLPs of its first two layers scaled by 1.5: output and log-probs change."""
    model = original_model()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith(("model.layers.0.mlp.", "model.layers.1.mlp.")):
                parameter.mul_(1.5)
    return model


@pytest.fixture(scope="module")
def models() -> dict[str, PreTrainedModel]:
    return {"original": original_model(), "changed": changed_model()}


@pytest.fixture
def server(vllm_weights_server: Any, models: dict[str, PreTrainedModel]) -> Iterator[Any]:
    """The session's vLLM, serving the bundled weights again after each test whatever it did."""
    yield vllm_weights_server
    with VllmHttpGeneration(config_for(vllm_weights_server.model), vllm_weights_server.base_url,
                            weight_transport="gloo") as trainer:
        trainer.update_weights(models["original"], 0)


def root(base_url: str) -> str:
    return base_url.removesuffix("/v1")


def greedy(base_url: str, model_name: str) -> list[tuple[list[int], list[float]]]:
    with VllmHttpGeneration(config_for(model_name), base_url) as generation:
        data = make_batch([chat_prompt(TOKENIZER, q) for q in QUESTIONS], TOKENIZER.pad_token_id)
        out = generation.generate(data, greedy=True)
    return [generated_part(out, data, row) for row in range(len(QUESTIONS))]


def assert_same(after: list[tuple[list[int], list[float]]], before: list[tuple[list[int], list[float]]]) -> None:
    for (ids, lps), (old_ids, old_lps) in zip(after, before, strict=True):
        assert ids == old_ids and max(abs(x - y) for x, y in zip(lps, old_lps, strict=True)) <= 1e-5


def test_a_gloo_push_changes_the_output_and_the_originals_restore_it_token_for_token(
        server: Any, models: dict[str, PreTrainedModel]) -> None:
    before = greedy(server.base_url, server.model)
    with VllmHttpGeneration(config_for(server.model), server.base_url, weight_transport="gloo") as trainer:
        trainer.update_weights(models["changed"], 1)
        changed = greedy(server.base_url, server.model)
        assert trainer.weight_version == 1
        assert any(ids != old for (ids, _), (old, _) in zip(changed, before))
        assert all(abs(lps[0] - old[0]) > 1e-2 for (_, lps), (_, old) in zip(changed, before))
        trainer.update_weights(models["original"], 2)
        steps = trainer.last_weight_update[root(server.base_url)]
    assert_same(greedy(server.base_url, server.model), before)
    assert httpx.get(f"{root(server.base_url)}/weight_info", trust_env=False).json() == {"weight_version": "2"}
    assert {"broadcast", "apply"} <= steps.keys()


def test_a_replica_that_fails_is_named_while_the_real_one_takes_the_version(
        server: Any, models: dict[str, PreTrainedModel]) -> None:
    failing = FakeReplica(fail={"/init_weight_transfer_engine": (500, "Weight transfer not configured")})
    with LoopbackServer(failing) as stub, \
            VllmHttpGeneration(config_for(server.model), [server.base_url, stub.base_url],
                               weight_transport="gloo") as trainer:
        with pytest.raises(WeightUpdateError) as failure:
            trainer.update_weights(models["changed"], 1)
        assert trainer.weight_version == 0
    error, stub_root = failure.value, root(stub.base_url)
    assert error.updated == [root(server.base_url)] and list(error.failed) == [stub_root]
    assert error.failed[stub_root].startswith("http_5xx at init_weight_transfer_engine")
    assert httpx.get(f"{root(server.base_url)}/weight_info", trust_env=False).json() == {"weight_version": "1"}


def test_a_trainer_killed_mid_broadcast_leaves_vllm_serving_the_old_weights(
        server: Any, models: dict[str, PreTrainedModel]) -> None:
    base = root(server.base_url)
    label = httpx.get(f"{base}/weight_info", trust_env=False).json()
    before = greedy(server.base_url, server.model)
    trainer = subprocess.run([sys.executable, "-c", TRAINER, server.base_url, server.model], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=600)
    assert trainer.returncode == -9, trainer.stderr[-3000:]  # it SIGKILLed itself ...
    assert trainer.stdout.strip() == f"sent {KILLED_AFTER} of 272"  # ... mid-broadcast, by construction
    assert httpx.get(f"{base}/is_paused", trust_env=False).json() == {"is_paused": False}
    assert httpx.get(f"{base}/weight_info", trust_env=False).json() == label
    assert_same(greedy(server.base_url, server.model), before)  # the old weights, whole
    # The next trainer connects afresh and pushes.
    with VllmHttpGeneration(config_for(server.model), server.base_url, weight_transport="gloo") as trainer_again:
        trainer_again.update_weights(models["changed"], 7)
        assert greedy(server.base_url, server.model) != before
