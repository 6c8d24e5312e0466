"""Saturation against real vLLM (CPU build, SmolLM2-135M-Instruct): does the full stack keep vLLM as busy as a direct
client does?

    .venv/bin/python -m benchmarks.perf.saturation [--rows 128] [--concurrency 32] [--max-tokens 64] [--quick]

Both sides send the same Chat Completions requests (fixed prompts, greedy, the same max tokens; the direct client
builds them with the same Responses -> Chat conversion that vllm_model uses) at the same concurrency: the direct
client straight to vLLM, the full stack as rollouts (collector -> simple_agent -> vllm_model -> vLLM, weather
environment; rows have no tools, so one model call per rollout). Phases alternate (direct, stack, direct, stack)
after a warm-up so that neither side gets a warmer prefix cache. Goal: stack / direct >= 0.95.
It starts a vLLM of its own: another client of a shared vLLM would be measured with it.
Writes benchmarks/results/saturation.json.
"""

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.perf.harness import WEATHER_AGENT, run_collector, weather_stack
from benchmarks.perf.results import load_average, recording
from benchmarks.perf.vllm_server import MODEL_NAME, vllm_server
from nemo_gym.http_client import HttpClient
from nemo_gym.jsonl_records import iter_records
from nemo_gym.protocol import to_chat_request

def rows(n: int, max_tokens: int) -> list[dict[str, Any]]:
    return [
        {"responses_create_params": {
            "input": [{"role": "user", "content": f"Write two sentences about the number {i}."}],
            "max_output_tokens": max_tokens, "temperature": 0.0,
        }, "expected_city": "none"}
        for i in range(n)
    ]


async def direct(base_url: str, batch: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """The same chat requests vllm_model would send, straight to vLLM, `concurrency` at a time."""
    http = HttpClient(max_connections=concurrency)
    requests = iter([to_chat_request(row["responses_create_params"], MODEL_NAME) for row in batch])
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        for request in requests:
            reply = await http.post_json(f"{base_url}/chat/completions", request)
            tokens += reply["usage"]["completion_tokens"]

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await http.aclose()
    seconds = time.perf_counter() - started
    return {"requests_per_s": round(len(batch) / seconds, 2), "seconds": round(seconds, 2), "tokens": tokens}


def stack_phase(stack: Any, work: Path, name: str, concurrency: int) -> dict[str, Any]:
    output = work / f"{name}_out.jsonl"
    result = run_collector(stack, work / "rows.jsonl", output, WEATHER_AGENT, concurrency)
    tokens = sum(row["response"]["usage"]["output_tokens"] for _, row in iter_records(output))
    return {"rollouts_per_s": result["rollouts_per_s"], "seconds": result["elapsed_s"], "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="32 rows, one round")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 32, 1
    batch = rows(args.rows, args.max_tokens)
    with recording("saturation", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_saturation_") as tmp:
        work = Path(tmp)
        (work / "rows.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in batch))
        with vllm_server(work) as base_url:
            with weather_stack(work / "stack", model_base_url=base_url, model_name=MODEL_NAME) as stack:
                asyncio.run(direct(base_url, batch[: args.concurrency], args.concurrency))  # warm-up
                phases: dict[str, list[dict[str, Any]]] = {"direct": [], "stack": []}
                for i in range(args.rounds):
                    phases["direct"].append(asyncio.run(direct(base_url, batch, args.concurrency)))
                    print(f"direct {i}: {phases['direct'][-1]}  load {load_average()}", flush=True)
                    phases["stack"].append(stack_phase(stack, work, f"stack{i}", args.concurrency))
                    print(f"stack  {i}: {phases['stack'][-1]}  load {load_average()}", flush=True)
        direct_rate = sum(p["requests_per_s"] for p in phases["direct"]) / args.rounds
        stack_rate = sum(p["rollouts_per_s"] for p in phases["stack"]) / args.rounds
        ratio = round(stack_rate / direct_rate, 3)
        print(f"direct client {direct_rate:.2f} requests/s | full stack {stack_rate:.2f} rollouts/s | "
              f"ratio {ratio:.3f} (goal >= 0.95)")
        recorder.write(
            {"stack_vs_direct_client": ratio},
            {"settings": {"rows": args.rows, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                          "rounds": args.rounds},
             "direct_requests_per_s": round(direct_rate, 2), "stack_rollouts_per_s": round(stack_rate, 2),
             "same_tokens_every_phase": len({p["tokens"] for p in phases["direct"] + phases["stack"]}) == 1,
             "load_average_at_end": load_average(),
             "phases": phases})


if __name__ == "__main__":
    main()
