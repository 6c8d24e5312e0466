"""The replica's model in closed form, and a driver that runs an engine against it in simulated time.

At a fixed concurrency C (each client sends its next request the moment its last one finishes) with every request
of P prompt tokens (none cached) and L output tokens, the C sequences run in lockstep waves of L steps: the first
step of a wave computes the C prompts, and step k reads C * (P + k) tokens of KV cache. So a wave takes

    L * (base + per_seq * C + per_context_token * C * P) + per_context_token * C * L * (L - 1) / 2 + prefill * C * P

(times the profile's slowdown), and the replica answers C requests per wave.
"""

from typing import Callable

from benchmarks.fleet.engine import BatchEngine, SimRequest
from benchmarks.fleet.profile import ReplicaProfile


def wave_s(profile: ReplicaProfile, concurrency: int, prompt_tokens: int, output_tokens: int) -> float:
    c, p, steps = concurrency, prompt_tokens, output_tokens
    decode = steps * (profile.base_s + profile.per_seq_s * c + profile.per_context_token_s * c * p)
    growth = profile.per_context_token_s * c * steps * (steps - 1) / 2
    return profile.slowdown * (decode + growth + profile.prefill_token_s * c * p)


def requests_per_s(profile: ReplicaProfile, concurrency: int, prompt_tokens: int, output_tokens: int) -> float:
    """The replica's throughput at `concurrency` (at most max_num_seqs, within the KV cache), in requests/s."""
    if concurrency > profile.max_num_seqs:
        raise ValueError(f"the model holds for at most max_num_seqs ({profile.max_num_seqs}) in flight")
    if concurrency * (prompt_tokens + output_tokens) > profile.kv_cache_tokens:
        raise ValueError("the model holds only while every sequence fits the KV cache")
    return concurrency / wave_s(profile, concurrency, prompt_tokens, output_tokens)


def closed_loop(engine: BatchEngine, concurrency: int, request: Callable[[int], SimRequest],
                duration_s: float) -> int:
    """Run `concurrency` clients against `engine` for `duration_s` simulated seconds, each sending `request(n)` (n
    counts the requests sent) as soon as its previous one finished; the number of requests finished."""
    sent = 0
    for _ in range(concurrency):
        engine.submit(request(sent), engine.t)
        sent += 1
    done = 0
    at = engine.t
    while True:
        for seq in engine.advance(at):
            done += 1
            engine.submit(request(sent), seq.finished_at)
            sent += 1
        engine.advance(at)  # admits what came at `at`
        next_at = engine.next_finish_at()
        if next_at is None or next_at > duration_s:
            return done
        at = next_at
