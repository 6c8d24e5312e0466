"""A stand-in for vLLM's OpenAI-compatible server that answers every chat completion with the same short text.

    python tests/slurm/apps/instant_chat_model.py --port 8000 [--delay-s 0.2]

`--delay-s` holds each answer back, so a test can catch a Slurm task mid-run. Test use only: real-model runs prove
the model path, this one keeps the Slurm tests fast.
"""

import argparse
import asyncio
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

ANSWER = "The answer is 42."
MODEL = "instant-stub"


def build_app(delay_s: float) -> Starlette:
    async def chat_completions(request: Request) -> JSONResponse:
        body = await request.json()
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
                        "message": {"role": "assistant", "content": ANSWER},
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
