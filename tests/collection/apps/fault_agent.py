"""A test agent server: instant, deterministic rollouts with optional fault injection.

Settings (all optional):
  delay_s          sleep before answering /run (lets tests kill a collector mid-run)
  fault            500 | 503 | 502_timeout | 400 | reset | hang | invalid
  fault_fraction   share of keys that fault, chosen deterministically by key (default 1.0)
  fault_while_file the fault only happens while this file exists (tests delete it to "heal" the agent)
  hang_s           how long `hang` sleeps (default 60)
  started_marker   a file this server appends its pid to when it starts serving (tests prove a server never started)
Reward is (task + rollout) % 2, so tests can predict every row. POST /stats answers how many /run calls arrived and
the most that were in flight at once ({"reset": true} starts the counts again).
"""

import asyncio
import os
import socket
import struct
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.server.base import BaseServer, HandlerError, json_route


def _reset_connection(request: Request) -> None:
    """Abort the TCP connection with an RST, as a crashed proxy or agent would (uvicorn exposes no API for it)."""
    transport = request.receive.__self__.transport  # uvicorn's per-request cycle holds the connection
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class FaultAgent(BaseServer):
    _runs = 0
    _in_flight = 0
    _max_in_flight = 0

    async def startup(self) -> None:
        marker = self.config.get("started_marker")
        if marker:
            with open(marker, "a") as file:
                file.write(f"{os.getpid()}\n")

    def _faulty(self, row: dict[str, Any]) -> bool:
        fault = str(self.config.get("fault", "none"))
        if fault == "none":
            return False
        marker = self.config.get("fault_while_file")
        if marker and not os.path.exists(marker):
            return False
        fraction = float(self.config.get("fault_fraction", 1.0))
        bucket = (row["_ng_task_index"] * 7 + row["_ng_rollout_index"] * 3) % 100
        return bucket < fraction * 100

    async def _run(self, row: dict[str, Any], request: Request) -> dict[str, Any]:
        self._runs += 1
        self._in_flight += 1
        self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            return await self._answer(row, request)
        finally:
            self._in_flight -= 1

    async def _stats(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        stats = {"runs": self._runs, "in_flight": self._in_flight, "max_in_flight": self._max_in_flight}
        if body.get("reset"):
            self._runs, self._max_in_flight = 0, self._in_flight
        return stats

    async def _answer(self, row: dict[str, Any], request: Request) -> dict[str, Any]:
        delay = float(self.config.get("delay_s", 0))
        if delay:
            await asyncio.sleep(delay)
        if self._faulty(row):
            fault = str(self.config["fault"])
            if fault == "reset":
                _reset_connection(request)
                raise HandlerError(500, "connection was reset")  # never reaches the client
            if fault == "hang":
                await asyncio.sleep(float(self.config.get("hang_s", 60)))
            if fault in ("500", "503"):
                raise HandlerError(int(fault), "injected fault", failure_class="http_5xx")
            if fault == "502_timeout":
                raise HandlerError(502, "model server timed out", failure_class="timeout")
            if fault == "400":
                raise HandlerError(502, "model server rejected the request", failure_class="http_4xx")
            if fault == "invalid":
                return {**row, "response": {"output": []}}
        reward = float((row["_ng_task_index"] + row["_ng_rollout_index"]) % 2)
        text = f"answer to task {row['_ng_task_index']}"
        response = {"id": "resp_test", "object": "response", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        ]}
        if self.config.get("report_usage"):  # as a model server's Responses reply carries it
            response["usage"] = {"input_tokens": 10, "output_tokens": 1 + row["_ng_task_index"]}
        return {**row, "response": response, "reward": reward}

    async def _aggregate_metrics(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        if "rows" not in body:
            return {"needs_rows": True}
        rows = body["rows"]
        groups: dict[int, list[float]] = {}
        for row in rows:
            groups.setdefault(row["_ng_task_index"], []).append(row["reward"])
        mean = sum(r["reward"] for r in rows) / len(rows)
        return {
            "agent_metrics": {"mean/reward": mean, "num_rollouts": len(rows), "num_tasks": len(groups)},
            "key_metrics": {"mean/reward": mean},
            "group_level_metrics": [
                {"_ng_task_index": task, "mean/reward": sum(r) / len(r)} for task, r in sorted(groups.items())
            ],
        }

    def routes(self) -> list[Route]:
        return [json_route("/run", self._run), json_route("/aggregate_metrics", self._aggregate_metrics),
                json_route("/stats", self._stats)]
