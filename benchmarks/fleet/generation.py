"""One generation of a simulated replica, planned when its request arrives: the prompt's ids and cacheable prefixes,
the output length (drawn from the prompt, cut at max_tokens), the answer's ids and text, and the key under which the
finished conversation is cached."""

from dataclasses import dataclass
from typing import Any

from benchmarks.fleet.engine import SimRequest
from benchmarks.fleet.replica import Completion
from benchmarks.fleet.tokens import answer, block_prefixes, draw_seed
from benchmarks.fleet.workload import Workload


@dataclass(frozen=True)
class Generation:
    request: SimRequest
    prompt_ids: list[int]
    generated_ids: list[int]
    text: str
    stopped: bool  # ended on its own (END_OF_TURN), not at max_tokens


def plan(prompt_ids: list[int], max_tokens: Any, workload: Workload, block: int) -> Generation:
    """The generation for `prompt_ids`; `max_tokens` as the request gave it (None or 0: the workload's)."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    prefixes = block_prefixes(prompt_ids, block)
    drawn = workload.output_tokens_for(draw_seed(prompt_ids, prefixes))
    limit = int(max_tokens or workload.max_tokens)
    if limit < 1:
        raise ValueError(f"max_tokens must be at least 1, got {limit}")
    output = min(limit, drawn)
    generated, text = answer(output, stopped=drawn <= limit)
    done = block_prefixes(prompt_ids + generated, block)
    request = SimRequest(prompt_tokens=len(prompt_ids), output_tokens=output, prefixes=prefixes,
                         done_key=done[-1][0] if done else None)
    return Generation(request, prompt_ids, generated, text, stopped=drawn <= limit)


def usage(generation: Generation, done: Completion) -> dict[str, Any]:
    """vLLM's usage block, with the prompt tokens its prefix cache gave."""
    prompt = generation.request.prompt_tokens
    return {"prompt_tokens": prompt, "completion_tokens": done.output_tokens,
            "total_tokens": prompt + done.output_tokens,
            "prompt_tokens_details": {"cached_tokens": done.cached_tokens}}
