"""What a simulated replica makes of a `/v1/completions` request whose prompt is token ids (vllm_model's token-exact
continuation), and the reply it sends (`return_token_ids`, `logprobs: 0`)."""

from typing import Any

from benchmarks.fleet.generation import Generation, plan, usage
from benchmarks.fleet.replica import Completion
from benchmarks.fleet.workload import Workload


def completion_request(body: dict[str, Any], workload: Workload, block: int) -> Generation:
    prompt = body.get("prompt")
    if not isinstance(prompt, list) or not all(type(i) is int and i >= 0 for i in prompt):
        raise ValueError("prompt must be a list of token ids")
    return plan(prompt, body.get("max_tokens"), workload, block)


def completion_body(generation: Generation, done: Completion, model: str, number: int) -> dict[str, Any]:
    choice = {"index": 0, "text": generation.text, "token_ids": generation.generated_ids,
              "prompt_token_ids": generation.prompt_ids, "finish_reason": "stop" if generation.stopped else "length",
              "logprobs": {"token_logprobs": [-0.5] * len(generation.generated_ids)}}
    return {"id": f"cmpl-{number}", "object": "text_completion", "model": model, "choices": [choice],
            "usage": usage(generation, done)}
