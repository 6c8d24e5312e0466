"""HFGeneration takes new weights in process: pushed weights change its output, the originals restore it token for
token, a bad folder changes nothing, and each completion says which weight versions generated it. The first two also
run on CUDA in bfloat16 where there is a GPU (marked gpu)."""

import asyncio
from pathlib import Path
from typing import Iterator

import pytest
import torch

from nemo_gym.experience.errors import WeightUpdateError
from nemo_gym.experience.generation import HFGeneration
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.generation_support import chat_prompt, generated_part, make_batch
from tests.experience.scripted import CountdownEnvironment, countdown_samples
from tests.experience.weight_folders import removed_after, write_weight_folders
from tests.helpers.model import MODEL_DIR

CONFIG = {"max_new_tokens": 8, "max_seq_len": 2048}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    with removed_after(tmp_path_factory.mktemp("weights")) as root:
        yield write_weight_folders(root)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a small machine shared with vLLM, two intra-op threads contend
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> Iterator[HFGeneration]:
    """The bundled model in process: float32 on the CPU, bfloat16 on CUDA (HFGeneration's defaults)."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device; deselect them with -m 'not gpu' on machines without one")
    with HFGeneration(CONFIG, MODEL_DIR, device=request.param) as hf:
        yield hf


def greedy(backend: HFGeneration) -> tuple[list[tuple[list[int], list[float]]], list[tuple[int, ...]]]:
    data = make_batch([chat_prompt(backend.tokenizer, q) for q in ("What is 2 + 3?", "Name a color.")],
                      backend.pad_token_id)
    out = backend.generate(data, greedy=True)
    return [generated_part(out, data, row) for row in range(2)], out["weight_versions"]


def test_pushed_weights_change_the_output_and_the_originals_restore_it(backend: HFGeneration,
                                                                       folders: dict[str, Path]) -> None:
    before, versions = greedy(backend)
    assert versions == [(0,), (0,)]
    backend.update_weights(folders["layers"], 1)
    changed, versions = greedy(backend)
    assert backend.weight_version == 1 and versions == [(1,), (1,)]
    assert any(ids != old_ids for (ids, _), (old_ids, _) in zip(changed, before))
    assert all(max(abs(a - b) for a, b in zip(lps, old_lps)) > 1e-2 for (_, lps), (_, old_lps) in zip(changed, before))
    backend.update_weights(folders["original"], 2)
    restored, versions = greedy(backend)
    assert backend.weight_version == 2 and versions == [(2,), (2,)]
    for (ids, lps), (old_ids, old_lps) in zip(restored, before):
        assert ids == old_ids
        assert max(abs(a - b) for a, b in zip(lps, old_lps)) <= 1e-5


def test_a_bad_folder_is_a_typed_error_and_the_old_weights_stay(backend: HFGeneration, folders: dict[str, Path],
                                                                tmp_path: Path) -> None:
    before, _ = greedy(backend)
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    data = (folders["layers"] / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[:len(data) // 2])
    for folder, says in [(tmp_path / "missing", "does not exist"), (truncated, "truncated or corrupt")]:
        with pytest.raises(WeightUpdateError, match=f"in-process model \\(invalid_weights: .*{says}") as failure:
            backend.update_weights(folder, 1)
        assert failure.value.version == 1 and failure.value.served_version == 0 and failure.value.updated == []
    assert backend.weight_version == 0
    assert greedy(backend)[0] == before


def test_an_update_waits_for_the_running_generation_at_most_its_timeout(folders: dict[str, Path]) -> None:
    with HFGeneration(CONFIG, MODEL_DIR, weight_update_timeout_s=0.2) as backend:
        with backend._lock:  # what a running generation holds
            with pytest.raises(WeightUpdateError, match="timeout: a generation held the model"):
                backend.update_weights(folders["layers"], 1)
        assert backend.weight_version == 0


class UpdateAfterFirstTurn(CountdownEnvironment):
    """Pushes `folder` into `policy` as version 1 while stepping the first turn, so turn 2 runs on new weights."""

    def __init__(self, policy: HFGeneration, folder: Path) -> None:
        super().__init__()
        self.policy, self.folder = policy, folder

    def step(self, message_log_batch: list, metadata: list):
        if self.policy.weight_version == 0:
            self.policy.update_weights(self.folder, 1)
        return super().step(message_log_batch, metadata)


def test_a_multi_turn_completion_records_the_versions_of_all_its_turns(folders: dict[str, Path]) -> None:
    # Greedy, with room for each turn to end on its own end-of-turn token (a length cut would end the episode).
    with HFGeneration({**CONFIG, "max_new_tokens": 48}, MODEL_DIR) as backend:
        template = ChatTemplate(backend.tokenizer)
        manager = RolloutManager(backend.tokenizer, {"countdown": UpdateAfterFirstTurn(backend, folders["layers"])},
                                 num_generations_per_prompt=1, max_seq_len=2048, max_rollout_turns=2,
                                 policy_generation=backend, greedy=True)
        sample = {key: column[0] for key, column in countdown_samples(template, [2]).items()}
        completion = asyncio.run(manager.run_rollout(sample)).completions[0]
        turns = [m["generation_weight_versions"] for m in completion.message_log if m["role"] == "assistant"]
        assert turns == [(0,), (1,)] and completion.generation_weight_versions == (0, 1)
