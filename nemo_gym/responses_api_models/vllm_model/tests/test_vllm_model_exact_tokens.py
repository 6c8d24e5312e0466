"""vllm_model's token-exact continuation against the real vLLM: a later turn's prompt is the earlier turn's exact
prompt + generation, then only the chat template's closing and the new messages."""

from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, running_stack

CONFIG = REPO_ROOT / "configs" / "vllm_model.yaml"
QUESTION = [{"role": "user", "content": "Guess my number between 1 and 100. Answer with one integer."}]


def _turn(url: str, input_items: list, **params) -> dict:
    body = {"input": input_items, "temperature": 0.0, "max_output_tokens": 12,
            "return_token_id_information": True, **params}
    reply = httpx.post(f"{url}/v1/responses", json=body, timeout=300, trust_env=False)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.vllm
@pytest.mark.parametrize("stop", [None, ["."]], ids=["natural_end", "stop_string"])
def test_second_turn_continues_the_first_turns_exact_tokens(vllm_server, tmp_path: Path, stop) -> None:
    template = ChatTemplate(AutoTokenizer.from_pretrained(MODEL_DIR))
    extra = {"stop": stop} if stop else {}
    with running_stack([f"+config_paths=[{CONFIG}]", f"+policy_base_url={vllm_server.base_url}",
                        "+policy_api_key=EMPTY", f"+policy_model_name={vllm_server.model}"], cwd=tmp_path) as stack:
        url = stack.url("policy_model")
        first = _turn(url, QUESTION, **extra)
        item = first["output"][-1]
        exact = item["prompt_token_ids"] + item["generation_token_ids"]
        observation = {"role": "user", "content": "Higher."}
        second = _turn(url, [*QUESTION, *first["output"], observation], **extra)
    prompt = second["output"][-1]["prompt_token_ids"]
    assert prompt[: len(exact)] == exact
    history = [*template.prompt_message_log(QUESTION),
               {"role": "assistant", "content": first["output"][-1]["content"][0]["text"],
                "token_ids": item["generation_token_ids"]}]
    assert prompt[len(exact):] == template.observation_ids(history, observation)
    if stop:
        # Stopped on the stop string, so the template's end-of-turn token had to be added after the generation.
        assert item["generation_token_ids"][-1] != 2 and prompt[len(exact)] == 2
    assert len(second["output"][-1]["generation_log_probs"]) == len(second["output"][-1]["generation_token_ids"])
