"""The harness itself is right: every HumanEval problem's own reference solution scores 1 in the code_exec server
that benchmarks/humaneval/config.yaml configures, run by a real `ng_run` stack; the 164 verifies are timed at 8
concurrent."""

import asyncio
import importlib.util
import time
from typing import Any, Iterator

import httpx
import orjson
import pytest
import yaml

from tests.helpers.stack import REPO_ROOT, Stack, running_stack

CONFIG = REPO_ROOT / "benchmarks" / "humaneval" / "config.yaml"
SERVER = "humaneval_resources_server"
CONCURRENT = 8
WALL_BOUND_S = 120.0  # measured about 5 s on 2 cores; the bound only catches a harness gone badly wrong


def _load_prepare() -> Any:
    spec = importlib.util.spec_from_file_location("humaneval_prepare", REPO_ROOT / "benchmarks" / "humaneval" /
                                                  "prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROBLEMS = _load_prepare().load_problems()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The benchmark's resources server as configured (its agent needs a model, which these tests do not)."""
    workdir = tmp_path_factory.mktemp("humaneval_canonical")
    server = {SERVER: yaml.safe_load(CONFIG.read_text())[SERVER]}
    (workdir / "server.yaml").write_bytes(orjson.dumps(server))
    with running_stack([f"+config_paths=[{workdir / 'server.yaml'}]"], cwd=workdir) as running:
        yield running


def _body(problem: dict[str, Any], answer: str) -> dict[str, Any]:
    return {"prompt": problem["prompt"], "test": problem["test"], "entry_point": problem["entry_point"],
            "response": {"output": [{"type": "message", "role": "assistant",
                                     "content": [{"type": "output_text", "text": answer}]}]}}


async def _verify_all(url: str, bodies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    gate = asyncio.Semaphore(CONCURRENT)
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        async def one(body: dict[str, Any]) -> dict[str, Any]:
            async with gate:
                reply = await client.post(f"{url}/verify", json=body)
                assert reply.status_code == 200, reply.text
                return reply.json()

        started = time.monotonic()
        results = await asyncio.gather(*(one(body) for body in bodies))
        return results, time.monotonic() - started


def test_every_canonical_solution_scores_1(stack: Stack) -> None:
    assert len(PROBLEMS) == 164
    # The reference solution is a body, the continuation of the prompt: sent as the model's raw text.
    bodies = [_body(problem, problem["canonical_solution"]) for problem in PROBLEMS]
    results, wall = asyncio.run(_verify_all(stack.url(SERVER), bodies))
    print(f"\n164 canonical HumanEval verifies at {CONCURRENT} concurrent: {wall:.1f} s wall "
          f"({164 / wall:.1f}/s), slowest program {max(r['duration_s'] for r in results):.2f} s")
    failed = [(p["task_id"], r["outcome"], r["outcome_detail"]) for p, r in zip(PROBLEMS, results)
              if r["reward"] != 1.0]
    assert failed == []
    assert all(r["sandboxed"] and r["completion_kind"] == "body" for r in results)
    assert wall < WALL_BOUND_S


def test_a_whole_function_in_a_fence_scores_1(stack: Stack) -> None:
    """What the prompt asks an instruct model for: the complete function (here: prompt + reference) in a block."""
    bodies = [_body(p, f"Sure:\n```python\n{p['prompt']}{p['canonical_solution']}```\nThis works.")
              for p in PROBLEMS[:16]]
    results, _ = asyncio.run(_verify_all(stack.url(SERVER), bodies))
    assert [(r["reward"], r["completion_kind"]) for r in results] == [(1.0, "function")] * 16


def test_a_wrong_solution_scores_0(stack: Stack) -> None:
    problem = PROBLEMS[0]
    (result,), _ = asyncio.run(_verify_all(stack.url(SERVER), [_body(problem, "    return None\n")]))
    assert (result["reward"], result["outcome"]) == (0.0, "failed")
    assert "AssertionError" in result["output_tail"]
