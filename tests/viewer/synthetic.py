"""Small synthetic rollout files with the shape real ones have (keys first, Responses API output with a tool call,
usage, reward), written in shuffled completion order, plus a failures sidecar — for the index and query tests."""

import random
from pathlib import Path
from typing import Any

import orjson


def rollout_row(task: int, rollout: int, agent: str = "agent_a") -> dict[str, Any]:
    reward = float((task + rollout) % 3 == 0)
    city = f"City{task}"
    return {
        "_ng_task_index": task, "_ng_rollout_index": rollout,
        "responses_create_params": {"input": [{"role": "user", "content": f"Weather in {city}? (task {task})"}]},
        "agent_ref": {"name": agent},
        "response": {"output": [
            {"type": "function_call", "call_id": f"c{task}_{rollout}", "name": "get_weather",
             "arguments": orjson.dumps({"city": city}).decode()},
            {"type": "function_call_output", "call_id": f"c{task}_{rollout}", "output": '{"weather": "sunny"}'},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": f"Answer {task}-{rollout}: it is \"sunny\" in {city}."}]},
        ], "usage": {"input_tokens": 10 + task, "output_tokens": 100 + 7 * rollout + task}},
        "reward": reward, "extracted_answer": f"sunny-{rollout % 2}",
    }


def write_run(path: Path, tasks: int, repeats: int, shards: int = 1, seed: int = 0,
              failed: dict[tuple[int, int], str] | None = None, agents: tuple[str, ...] = ("agent_a",)) -> list[Path]:
    """Rollouts of `tasks` x `repeats` keys (except the `failed` ones, which go to the failures sidecar of the first
    shard with their class) over `shards` files in shuffled order; returns the rollout files."""
    failed = failed or {}
    keys = [(t, r) for t in range(tasks) for r in range(repeats) if (t, r) not in failed]
    random.Random(seed).shuffle(keys)
    paths = [path] if shards == 1 else [path.with_name(f"{path.stem}_shard{i}.jsonl") for i in range(shards)]
    outs = [open(p, "wb") for p in paths]
    for i, (task, rollout) in enumerate(keys):
        agent = agents[task % len(agents)]
        outs[i % shards].write(orjson.dumps(rollout_row(task, rollout, agent)) + b"\n")
    for out in outs:
        out.close()
    if failed:
        with open(paths[0].with_name(f"{paths[0].stem}_failures.jsonl"), "wb") as out:
            for (task, rollout), cls in failed.items():
                record = {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agents[0]},
                          "failure_class": cls, "attempts": 3, "last_error": f"boom {cls}", "http_status": 500}
                out.write(orjson.dumps(record) + b"\n")
    return paths


def expected_reward(task: int, rollout: int) -> float:
    return float((task + rollout) % 3 == 0)
