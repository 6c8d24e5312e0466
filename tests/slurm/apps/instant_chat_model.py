"""A stand-in for vLLM's OpenAI-compatible server that answers arithmetic questions instantly: right when the first
operand is even (see `answer`), "42" otherwise, so a run's rewards are a known mix of 0 and 1.

    python tests/slurm/apps/instant_chat_model.py --port 8000 [--delay-s 0.2]

`--delay-s` holds each answer back, so a test can catch a Slurm task mid-run. Test use only: real-model runs prove
the model path, this one keeps the Slurm tests fast.
"""

import argparse
import asyncio
import re
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

MODEL = "instant-stub"
QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def answer(question: str) -> str:
    """The reply to one user message; the Slurm tests compute the expected rewards with this same function."""
    match = QUESTION.search(question)
    if match and int(match.group(1)) % 2 == 0:
        return f"The answer is {int(match.group(1)) + int(match.group(2))}."
    return "The answer is 42."


def build_app(delay_s: float) -> Starlette:
    async def chat_completions(request: Request) -> JSONResponse:
        body = await request.json()
        question = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
        if delay_s:
            await asyncio.sleep(delay_s)
        return JSONResponse(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer(str(question))},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]), Route("/v1/models", models)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-s", type=float, default=0.0, help="seconds to wait before each answer")
    args = parser.parse_args()
    uvicorn.run(build_app(args.delay_s), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
