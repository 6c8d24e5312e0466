"""Automatic concurrency from vLLM's own signals: when every model server of the run reads its replicas' load from
vLLM (vllm_model's `GET /engine_load`, responses_api_models/vllm_model/engine_load.py), the level starts where vLLM
says its KV caches hold the work, and follows their queues, instead of probing for the throughput knee (knee.py).

- It starts at the fleet's capacity: the sum over the replicas of the requests of `max_model_len` tokens each KV
  cache holds (the "Maximum concurrency" vLLM logs at start). Shorter requests fit more, which the queue shows.
- At each read of the load (every `model_server_stats.POLL_S`): a replica that preempted a request since the last
  read, or KV caches fuller than `KV_TARGET`, back the level off to `BACKOFF` times the rollouts in flight;
  requests waiting in vLLM's queues beyond a short queue (`WAIT_SLACK` of those running, at least one) lower it to
  the rollouts in flight less that excess, so that the batches stay full and nothing more waits; with every place
  taken (the level, not the fleet, holds rollouts back) and no more than a short queue waiting (a busy fleet always
  shows one between its engines' steps) it rises by the room the KV caches have left (`KV_TARGET` over their use:
  what the requests running now take tells how many more fit), between `RAISE` and `MAX_RAISE` times, at least one
  more; else it holds. A rollout spends part of its time outside vLLM (tools,
  verification), which the queue accounts for. Cuts start from what is in flight, so a queue that two reads see
  before the rollouts above the new level have ended cuts once, not twice.
- A rollout that failed as rate-limited cuts the level as `Aimd` does (concurrency.py).
A run too short to measure anything starts with all its rollouts in flight (`knee.first_level`) all the same.
"""

import math
from dataclasses import dataclass
from typing import Any

from nemo_gym.rollout_collection.concurrency import Aimd, Outcome

BACKOFF = 0.85
RAISE = 1.1
MAX_RAISE = 2.0
KV_TARGET = 0.9
WAIT_SLACK = 0.05


@dataclass(frozen=True)
class FleetLoad:
    """The run's vLLM replicas together, as last read."""

    replicas: int
    running: int
    waiting: int
    kv_cache_usage: float  # the mean over the replicas
    preemptions: int  # since the replicas started
    capacity: float  # requests of max_model_len tokens the KV caches hold at once

    @classmethod
    def of(cls, servers: dict[str, list[dict[str, Any]]]) -> "FleetLoad | None":
        """The sum of every server's replicas (`GET /engine_load` answers by server name); None when one of them
        reported no capacity, could not be read or answered in another shape: then the level is not vLLM's to say."""
        replicas = [replica for loads in servers.values() for replica in loads]
        if not servers or not replicas or not all(_well_formed(r) for r in replicas):
            return None
        return cls(replicas=len(replicas), running=sum(r["running"] for r in replicas),
                   waiting=sum(r["waiting"] for r in replicas),
                   kv_cache_usage=sum(r["kv_cache_usage"] for r in replicas) / len(replicas),
                   preemptions=sum(r["preemptions"] for r in replicas),
                   capacity=sum(r["capacity"] for r in replicas))

    def line(self) -> str:
        return (f"vLLM: {self.running} running, {self.waiting} waiting, KV cache {self.kv_cache_usage:.0%}, "
                f"{self.preemptions} preemptions, capacity {self.capacity:g} on {self.replicas} replica(s)")


def _well_formed(replica: Any) -> bool:
    """A replica's load as vllm_model reports it: counts, a KV-cache share and a capacity, no error."""
    if not isinstance(replica, dict) or "error" in replica:
        return False
    def number(value: Any, whole: bool) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            return False
        return float(value) >= 0

    return (all(number(replica.get(key), True) for key in ("running", "waiting", "preemptions"))
            and all(number(replica.get(key), False) for key in ("kv_cache_usage", "capacity")))


def start_level(load: FleetLoad, ceiling: int) -> int:
    """The level a long run starts at: the fleet's capacity, within 1 and `ceiling`."""
    return max(1, min(ceiling, math.floor(load.capacity)))


class EngineLevel:
    """The level from vLLM's queue and KV cache (see the module docstring); a `ConcurrencyPolicy`."""

    def __init__(self, ceiling: int, level: int, load: FleetLoad) -> None:
        self.ceiling = ceiling
        self.target = level
        self.last = load
        self.reason = f"started at vLLM's capacity ({load.line()})"
        self._aimd = Aimd(ceiling)

    def observe(self, load: FleetLoad, level: int, in_flight: int) -> None:
        """A new read of the fleet's load, with the gate at `level` and `in_flight` rollouts in it. A cut starts
        from what is in flight, not from the level, and never raises it: the level may already be below what is in
        flight (rollouts leave only as they end), and the queue a read sees again before they have is the same queue,
        not a further one."""
        preempted = load.preemptions > self.last.preemptions
        self.last = load
        short_queue = max(1, math.floor(WAIT_SLACK * load.running))
        if preempted or load.kv_cache_usage > KV_TARGET:
            self.target = max(1, min(level, math.floor(in_flight * BACKOFF)))
            self.reason = f"backed off: {'preemptions' if preempted else 'KV cache full'} ({load.line()})"
        elif load.waiting > short_queue:
            self.target = max(1, min(level, in_flight - (load.waiting - short_queue)))
            self.reason = f"lowered by the requests waiting beyond a short queue ({load.line()})"
        elif in_flight >= level:  # every place taken: the level, not the fleet, holds rollouts back
            # A short queue is what a busy fleet always shows between its engines' steps: no reason to hold.
            room = KV_TARGET / load.kv_cache_usage if load.kv_cache_usage > 0 else MAX_RAISE
            factor = min(MAX_RAISE, max(RAISE, room))
            self.target = min(self.ceiling, max(level + 1, math.floor(level * factor)))
            self.reason = (f"raised: {'only a short queue' if load.waiting else 'nothing'} waits in vLLM "
                           f"({load.line()})")
        else:
            self.target = level

    def next_level(self, level: int, outcome: Outcome, admitted: int) -> int:
        if outcome.rate_limited:
            self.target = self._aimd.next_level(level, outcome, admitted)
            self.reason = self._aimd.reason
        return self.target
