"""vllm_model's token-exact continuation against a simulated replica: the second turn of a conversation without
tools is the first turn's exact prompt and generation plus only what the template adds (through the replica's
`/tokenize` and `/v1/completions`), and the replica's prefix cache serves the part it computed before."""

from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.fleet.__main__ import DEFAULT_MODEL
from benchmarks.fleet.stack import fleet_process
from benchmarks.fleet.tokens import END_OF_TURN, NEWLINE, render
from benchmarks.fleet.workload import MULTI_TURN
from nemo_gym import protocol
from nemo_gym.model_calls import REPLY_FIELD
from tests.helpers.stack import running_stack


def _respond(url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{url}/v1/responses", json={**body, protocol.RETURN_TOKENS_PARAM: True},
                       headers={protocol.SESSION_HEADER: "one-conversation"}, timeout=60, trust_env=False)
    reply.raise_for_status()
    return dict(reply.json())


def test_the_next_turn_continues_the_exact_tokens_and_hits_the_cache(tmp_path: Path) -> None:
    with fleet_process(tmp_path / "fleet", replicas=1, time_scale=200.0, workload=MULTI_TURN) as fleet:
        config = {"policy_model": {"responses_api_models": {"vllm_model": {
            "base_url": fleet.base_urls, "model": DEFAULT_MODEL}}}}
        (tmp_path / "model.yaml").write_text(yaml.safe_dump(config))
        with running_stack([f"+config_paths=[{tmp_path / 'model.yaml'}]"], cwd=tmp_path) as stack:
            url = stack.url("policy_model")
            first_input = [{"role": "user", "content": "Guess my number, between 1 and 100. " * 20}]
            first = _respond(url, {"input": first_input, "max_output_tokens": 64})
            answer = first["output"][-1]
            second = _respond(url, {"input": [*first_input, answer, {"role": "user", "content": "Higher."}],
                                    "max_output_tokens": 64})
    so_far = answer["prompt_token_ids"] + answer["generation_token_ids"]
    # what the template adds: the closing of the assistant turn the generation did not produce, the new message, the
    # generation prompt (the replica's template: tokens.render)
    closing = [NEWLINE] if so_far[-1] == END_OF_TURN else [END_OF_TURN, NEWLINE]
    added = render([{"role": "user", "content": "Higher."}], add_generation_prompt=True)
    assert second["output"][-1]["prompt_token_ids"] == so_far + closing + added
    assert first[REPLY_FIELD]["cached_tokens"] == 0
    assert second[REPLY_FIELD]["cached_tokens"] == len(so_far) // 16 * 16  # every whole block of the first turn
