"""A bfloat16 vLLM against a float32 trainer: the mismatch is real, bounded, and far below a wrong-weights one.

A trainer may choose a bf16 generator for speed (examples/grpo's --generator-dtype bfloat16). The bundled checkpoint
is stored in bf16, so both sides hold the same weights; only the kernels' precision differs. Measured here: about
1.035 (token_mult_prob_error); the same tokens against perturbed weights (noise 0.01): 2.8. This test starts a vLLM in
bfloat16 on whatever CPU runs it (slower without native bf16, never skipped), so the bf16 branch is tested on both
CPU kinds; the float32 exactness checks are tests/experience/test_grpo_agreement_vllm.py.
"""

import asyncio
from typing import Iterator

import orjson
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.grpo import completion_logprobs, token_mult_prob_error
from nemo_gym.experience.interfaces import Completion
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.helpers.model import MODEL_DIR, VLLMServer, vllm_process
from tests.helpers.stack import REPO_ROOT

pytestmark = pytest.mark.vllm

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
ROWS = [orjson.loads(line) for line in
        (REPO_ROOT / "nemo_gym/resources_servers/math/data/arithmetic_example.jsonl").read_bytes().splitlines()[:3]]
# bf16 against float32 on the same weights: measurably above float32's 1.0001, well below other weights'.
BF16_MISMATCH = (1.005, 1.10)
OTHER_WEIGHTS = 1.2  # beyond the bf16 bound: the bound can fail


@pytest.fixture(scope="module")
def bf16_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    log = tmp_path_factory.mktemp("vllm_bf16") / "vllm.log"
    with vllm_process(None, log, dtype="bfloat16") as server:
        yield server


@pytest.fixture(scope="module")
def completions(bf16_vllm: VLLMServer) -> list[Completion]:
    config = {"model_name": bf16_vllm.model, "max_seq_len": 2048, "pad_token_id": TOKENIZER.pad_token_id,
              "max_new_tokens": 24, "temperature": 1.0}
    template = ChatTemplate(TOKENIZER)
    with VllmHttpGeneration(config, bf16_vllm.base_url) as policy, \
            MathEnvironment(num_workers=1, verify_timeout_s=300) as math_env:
        manager = RolloutManager(TOKENIZER, {"math": math_env}, 4, 2048, 1, policy_generation=policy)

        async def every_row() -> list[Completion]:
            records = await asyncio.gather(*(manager.run_rollout(datum_from_row(row, template, "math", idx))
                                             for idx, row in enumerate(ROWS)))
            return [c for record in records for c in record.completions]

        return asyncio.run(every_row())


def _error(model: torch.nn.Module, completions: list[Completion]) -> float:
    pairs = [completion_logprobs(model, c.message_log) for c in completions]
    train, generation = torch.cat([t for t, _ in pairs]), torch.cat([g for _, g in pairs])
    assert len(train) >= 50, f"only {len(train)} generated tokens to compare"
    return token_mult_prob_error(train, generation, torch.ones_like(train))


def test_a_bf16_generator_mismatches_a_float32_trainer_within_bounds(completions: list[Completion]) -> None:
    trainer = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()
    error = _error(trainer, completions)
    # Above float32's 1.0001: the server really runs bf16 (the dtype reached vLLM); below the bound: it is usable.
    assert BF16_MISMATCH[0] < error <= BF16_MISMATCH[1], f"token_mult_prob_error {error:.4f}"
    # The control: the same tokens against other weights disagree far more, so the bound above can fail.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in trainer.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.01)
    other = _error(trainer, completions)
    print(f"\nbf16 generator against a float32 trainer: {error:.4f}; against perturbed weights: {other:.4f}")
    assert other > OTHER_WEIGHTS, f"other weights explain the bf16 tokens as well ({other:.4f})"

