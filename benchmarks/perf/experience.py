"""Experience-layer throughput on the real vLLM (CPU build, SmolLM2-135M-Instruct), as ratios from one run.

    .venv/bin/python -m benchmarks.perf.experience [--samples 32] [--rounds 2] [--vllm-url URL]

1. Per-sample vs batched turns: the same number-guessing games (secrets spread over 1..10 in [1, 10], up to 10
   turns, so samples need different numbers of turns) played by `run_async_multi_turn_rollout` (each sample its own
   turn loop) and `run_multi_turn_rollout` (all active samples one turn at a time). Generated tokens/s.
   - sampled (temperature 1, up to 128 tokens a turn): replies of very different lengths, as in real multi-turn
     work; the two modes play different games, so tokens/s is the comparable figure. Goal: per-sample >= 1.5x.
   - greedy (up to 48 tokens): both modes play exactly the same games, a control showing what scheduling alone
     gains when every turn is equally short.
2. Overhead: the same single-turn arithmetic prompts (asking for a worked explanation), greedy, the same max tokens,
   at the same concurrency, through the experience layer (`run_async_multi_turn_rollout` with the math environment)
   and through a plain client posting the same token prompts to vLLM's /v1/completions. Generated tokens/s.
   Goal: layer / direct >= 0.9.
Phases alternate after a warm-up so neither side gets a warmer cache. Writes benchmarks/results/experience.json.
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import aiohttp
from transformers import AutoTokenizer

from benchmarks.perf.results import Recorder, load_average, recording
from benchmarks.perf.vllm_server import MODEL_DIR, MODEL_NAME, vllm_server
from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from nemo_gym.experience.turns.rollouts import run_async_multi_turn_rollout, run_multi_turn_rollout
from nemo_gym.resources_servers.number_guess import game

MAX_SEQ_LEN = 2048
# The first checks import sympy in the verifier workers; on a loaded shared machine that alone can pass 30 s.
VERIFY_TIMEOUT_S = 300.0
SAMPLED_TOKENS = 128
GREEDY_TOKENS = 64


def game_datums(template: ChatTemplate, samples: int) -> list[dict[str, Any]]:
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": game.instructions(1, 10)}]},
             "secret": 1 + i % 10, "low": 1, "high": 10} for i in range(samples)]
    return [datum_from_row(row, template, "number_guess", i) for i, row in enumerate(rows)]


def math_datums(template: ChatTemplate, samples: int, explain: bool = False) -> list[dict[str, Any]]:
    ask = "Explain step by step, then give the answer." if explain else "Answer with just the number."
    rows = [{"responses_create_params": {"input": [
        {"role": "user", "content": f"What is {i % 9 + 1} + {i // 9 % 9 + 1}? {ask}"}]},
        "expected_answer": str(i % 9 + 1 + i // 9 % 9 + 1)} for i in range(samples)]
    return [datum_from_row(row, template, "math", i) for i, row in enumerate(rows)]


def _generated_tokens(batch: Any) -> int:
    return sum(len(m["token_ids"]) for log in batch["message_log"] for m in log if m["role"] == "assistant")


def rollout_phase(rollout: Callable, backend: VllmHttpGeneration, datums: list, tokenizer: Any,
                  envs: dict[str, Any], max_turns: int) -> dict[str, Any]:
    started = time.perf_counter()
    batch, metrics = rollout(backend, datums, tokenizer, envs, MAX_SEQ_LEN, max_turns)
    seconds = time.perf_counter() - started
    tokens = _generated_tokens(batch)
    turns = [sum(m["role"] == "assistant" for m in log) for log in batch["message_log"]]
    return {"seconds": round(seconds, 2), "generated_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "turns_min": min(turns), "turns_max": max(turns), "turns_mean": round(statistics.mean(turns), 2),
            "mean_total_reward": metrics["mean_total_reward"], "load_average": load_average()}


async def direct_phase(base_url: str, datums: list, max_tokens: int) -> dict[str, Any]:
    """The same token prompts straight to vLLM, all at once (the layer's concurrency for this batch)."""
    prompts = [flat_token_ids(d["message_log"]).tolist() for d in datums]
    started = time.perf_counter()
    async with aiohttp.ClientSession(trust_env=False) as session:
        async def one(prompt: list[int]) -> int:
            body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                    "return_token_ids": True, "logprobs": 0}
            async with session.post(f"{base_url}/completions", json=body) as response:
                reply = await response.json()
            return len(reply["choices"][0]["token_ids"])

        tokens = sum(await asyncio.gather(*(one(p) for p in prompts)))
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "generated_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "load_average": load_average()}


def _mean_rate(phases: list[dict[str, Any]]) -> float:
    return statistics.mean(p["tokens_per_s"] for p in phases)


def _say(name: str, phase: dict[str, Any]) -> None:
    print(f"{name:<28} {phase['tokens_per_s']:>8.1f} tok/s  {phase['seconds']:>7.1f} s  {phase}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--vllm-url", help="a vLLM already serving the bundled model (default: start one)")
    parser.add_argument("--quick", action="store_true", help="8 samples, one round")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.rounds = 8, 1
    with recording("experience", args.quick) as recorder:
        measure(args, recorder)


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    template = ChatTemplate(tokenizer)
    games, sums = game_datums(template, args.samples), math_datums(template, args.samples, explain=True)
    base = {"model_name": MODEL_NAME, "max_seq_len": MAX_SEQ_LEN, "pad_token_id": tokenizer.pad_token_id}
    backends = {"sampled": {**base, "max_new_tokens": SAMPLED_TOKENS, "temperature": 1.0},
                "greedy": {**base, "max_new_tokens": GREEDY_TOKENS, "temperature": 0.0}}
    phases: dict[str, list[dict[str, Any]]] = {name: [] for name in (
        "sampled_batched", "sampled_per_sample", "greedy_batched", "greedy_per_sample", "direct", "layer")}
    with tempfile.TemporaryDirectory(prefix="ng_experience_bench_") as tmp, \
            vllm_server(Path(tmp), args.vllm_url) as base_url, \
            VllmHttpGeneration(backends["sampled"], base_url) as sampled, \
            VllmHttpGeneration(backends["greedy"], base_url) as greedy, \
            MathEnvironment(verify_timeout_s=VERIFY_TIMEOUT_S) as math_env:
        game_envs = {"number_guess": NumberGuessEnvironment()}
        math_envs = {"math": math_env}
        # Warm-up: vLLM's first batches, and the math environment's verifier workers (they import sympy).
        rollout_phase(run_async_multi_turn_rollout, sampled, games[:8], tokenizer, game_envs, 2)
        rollout_phase(run_async_multi_turn_rollout, greedy, sums[:8], tokenizer, math_envs, 1)
        for _ in range(args.rounds):
            for kind, backend in (("sampled", sampled), ("greedy", greedy)):
                for mode, rollout in (("batched", run_multi_turn_rollout),
                                      ("per_sample", run_async_multi_turn_rollout)):
                    name = f"{kind}_{mode}"
                    phases[name].append(rollout_phase(rollout, backend, games, tokenizer, game_envs, args.max_turns))
                    _say(f"game, {kind}, {mode}", phases[name][-1])
            phases["direct"].append(asyncio.run(direct_phase(base_url, sums, GREEDY_TOKENS)))
            _say("arithmetic, direct client", phases["direct"][-1])
            phases["layer"].append(rollout_phase(run_async_multi_turn_rollout, greedy, sums, tokenizer, math_envs, 1))
            _say("arithmetic, experience layer", phases["layer"][-1])
    ratios = {
        "per_sample_vs_batched": {
            kind: round(_mean_rate(phases[f"{kind}_per_sample"]) / _mean_rate(phases[f"{kind}_batched"]), 3)
            for kind in ("sampled", "greedy")},
        "layer_vs_direct_client": round(_mean_rate(phases["layer"]) / _mean_rate(phases["direct"]), 3),
    }
    print(f"per-sample / batched: {ratios['per_sample_vs_batched']} (goal >= 1.5 sampled); "
          f"layer / direct client: {ratios['layer_vs_direct_client']:.3f} (goal >= 0.9)")
    recorder.write(ratios, {
        "settings": {"samples": args.samples, "rounds": args.rounds, "max_turns": args.max_turns,
                     "game_range": [1, 10], "sampled_max_new_tokens": SAMPLED_TOKENS,
                     "greedy_max_new_tokens": GREEDY_TOKENS},
        "phases": phases})

if __name__ == "__main__":
    main()
