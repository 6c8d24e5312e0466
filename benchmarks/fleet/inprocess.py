"""A fleet run in one process and in simulated time: the collector's concurrency gate and policy (`AdaptiveLimit`
with `ThroughputKnee` or a fixed level), vllm_model's router (`ReplicaRouter`), and simulated replicas, without the
HTTP between them, as callbacks on an event queue (events.py).

It does what those parts do in a real run: a rollout is `turns` model calls of one session, a tool call's time
apart; the router picks each call's replica, counts it in flight, marks a replica down when it dies under a call,
and a probe finds it up again; a failed attempt is the collector's to retry, within `max_attempts`, as a new
session after a backoff. An hour of fleet time takes seconds to a minute of CPU, and every number is the same on an
idle machine as on a loaded one (the same seed gives the same run).

The HTTP path (the real collector, agent and vllm_model in front of replicas served by fleet.py) is measured by
the fleet benchmark too, for the CPU our stack needs per rollout; this harness is for what the fleet does.
"""

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from benchmarks.fleet.engine import SimRequest
from benchmarks.fleet.events import EventQueue
from benchmarks.fleet.profile import H100_LLAMA_8B, ReplicaProfile
from benchmarks.fleet.replica import Completion, ReplicaDown, SimReplica
from benchmarks.fleet.workload import Workload
from nemo_gym.failures import RetryPolicy
from nemo_gym.responses_api_models.vllm_model.routing import ReplicaRouter, RoutingMode
from nemo_gym.rollout_collection.concurrency import INITIAL_LEVEL, AdaptiveLimit, Fixed, Outcome
from nemo_gym.rollout_collection.engine_level import EngineLevel, FleetLoad, start_level
from nemo_gym.rollout_collection.knee import ThroughputKnee
from nemo_gym.rollout_collection.model_server_stats import POLL_S

PROBE_S = 0.002  # a probe's GET /models
_KEY_STRIDE = 64  # prefix keys per rollout: a prompt and an answer key per turn


@dataclass(frozen=True)
class FleetSetup:
    replicas: int
    workload: Workload
    duration_s: float
    concurrency: int | None = None  # None: automatic, by `policy`
    # The automatic level: the throughput knee, or vLLM's own signals read every POLL_S (what the collector does
    # when its model servers read their replicas' /metrics), the replicas serving `max_model_len`.
    policy: Literal["knee", "engine"] = "knee"
    max_model_len: int = 8192
    routing: RoutingMode = "load_aware"
    slow: tuple[tuple[int, float], ...] = ()  # (replica, factor): that replica's steps take factor times as long
    kill: tuple[int, float, float] | None = None  # (replica, dies at, back at), simulated seconds
    measure_from_s: float | None = None  # start of the steady-state window (default: half the run)
    ceiling: int = 1 << 16  # the automatic level's limit: none that matters
    sample_s: float = 10.0
    tool_s: float = 0.05  # between a rollout's turns: the tool call and the agent's own work
    max_attempts: int = 3
    profile: ReplicaProfile = H100_LLAMA_8B

    @property
    def slots(self) -> int:
        return self.replicas * self.profile.max_num_seqs


@dataclass
class Sample:
    """The fleet over one sampling interval."""

    t: float
    level: int
    in_flight: int
    utilization: float  # occupied sequence slots over all replicas' slots
    rollouts_per_s: float
    output_tokens_per_s: float
    waiting: int  # requests queued in the replicas at the end of the interval
    replicas_up: int


@dataclass
class FleetResult:
    setup: FleetSetup
    window_s: tuple[float, float]
    rollouts_per_s: float
    output_tokens_per_s: float
    utilization: float
    prefix_hit_rate: float  # cached over prompt tokens, admitted in the window
    mean_waiting: float  # requests queued in the replicas, on average over the window
    final_level: int
    hold_from_s: float | None  # when the automatic level first held (None: fixed, or never)
    samples: list[Sample]
    started: int  # rollouts let in
    succeeded: int
    failed: int
    duplicates: int  # rollouts that succeeded more than once (must be 0)
    retried: int  # attempts after a first one
    moved: int  # sessions the router moved (their replica overloaded or down)
    lag_s: float  # simulated seconds answers went out late, per answer (0 in simulated time)
    knee_points: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {key: value for key, value in vars(self).items() if key not in ("setup", "samples")}
        out["samples"] = [vars(sample) for sample in self.samples]
        return out


def admit_now(limit: AdaptiveLimit) -> int | None:
    """A place in `limit` if one is free now (the admission count), else None: its `acquire` with a place free
    returns at once, so it runs here to the end without a loop."""
    if limit.in_flight >= limit.level:
        return None
    acquire = limit.acquire()
    try:
        acquire.send(None)
    except StopIteration as admitted:
        return int(admitted.value)
    acquire.close()
    raise RuntimeError("AdaptiveLimit.acquire waited although a place was free")


class _Rollout:
    """One rollout's state between its callbacks."""

    __slots__ = ("number", "admitted", "started", "attempt", "turn", "tokens", "prefixes", "replica")

    def __init__(self, number: int, admitted: int, started: float) -> None:
        self.number, self.admitted, self.started = number, admitted, started
        self.attempt = 1
        self.turn, self.tokens, self.replica = 0, 0, 0
        self.prefixes: list[tuple[int, int]] = []


class _Fleet:
    def __init__(self, setup: FleetSetup) -> None:
        self.setup = setup
        self.queue = EventQueue()
        profiles = [setup.profile] * setup.replicas
        for index, factor in setup.slow:
            profiles[index] = setup.profile.slower(factor)
        self.replicas = [SimReplica(profile, self.queue) for profile in profiles]
        self.router = ReplicaRouter(setup.replicas, setup.routing, clock=self.queue.now)
        self.policy: ThroughputKnee | None = None
        self.engine_level: EngineLevel | None = None
        if setup.concurrency is not None:
            self.limit = AdaptiveLimit(setup.concurrency, Fixed(), initial=setup.concurrency)
        elif setup.policy == "engine":
            load = self._load()
            start = start_level(load, setup.ceiling)
            self.engine_level = EngineLevel(setup.ceiling, start, load)
            self.limit = AdaptiveLimit(setup.ceiling, self.engine_level, initial=start)
        else:
            self.policy = ThroughputKnee(setup.ceiling, clock=self.queue.now)
            self.limit = AdaptiveLimit(setup.ceiling, self.policy, initial=INITIAL_LEVEL)
        self.retry = RetryPolicy(max_attempts=setup.max_attempts)
        self.successes: dict[int, int] = {}
        self.failed = 0
        self.retried = 0
        self.started = 0
        self.completed = 0
        self.samples: list[Sample] = []
        self.hold_from_s: float | None = None
        self._marks: list[tuple[float, float, int, int, int, int, int]] = []

    def run(self) -> FleetResult:
        setup, queue = self.setup, self.queue
        if setup.kill:
            replica = self.replicas[setup.kill[0]]
            queue.call_at(setup.kill[1], replica.kill)
            queue.call_at(setup.kill[2], replica.revive)
        self._snap()
        queue.call_later(setup.sample_s, self._sample)
        if self.engine_level is not None:
            queue.call_later(POLL_S, self._poll)
        self._fill()
        queue.run_until(setup.duration_s)
        self._snap()
        return self._result()

    def _fill(self) -> None:
        while (admitted := admit_now(self.limit)) is not None:
            rollout = _Rollout(self.started, admitted, self.queue.now())
            self.started += 1
            self._turn(rollout)

    def _turn(self, rollout: _Rollout) -> None:
        workload, number, turn = self.setup.workload, rollout.number, rollout.turn
        base = number * _KEY_STRIDE
        rollout.tokens += workload.prompt_tokens if turn == 0 else workload.tool_result_tokens
        rollout.prefixes.append((base + 2 * turn, rollout.tokens))
        request = SimRequest(prompt_tokens=rollout.tokens, output_tokens=workload.output_tokens(number, turn),
                             prefixes=tuple(rollout.prefixes), done_key=base + 2 * turn + 1)
        rollout.replica = self.router.pick(f"{number}/{rollout.attempt}")
        for due in self.router.due_probes():
            self.queue.call_later(PROBE_S, partial(self._probed, due))
        self.replicas[rollout.replica].submit(request, lambda done: self._answered(rollout, done),
                                              lambda error: self._replica_failed(rollout, error))

    def _answered(self, rollout: _Rollout, done: Completion) -> None:
        self.router.done(rollout.replica)
        rollout.tokens += done.output_tokens
        rollout.prefixes.append((rollout.number * _KEY_STRIDE + 2 * rollout.turn + 1, rollout.tokens))
        rollout.turn += 1
        if rollout.turn < self.setup.workload.turns:
            self.queue.call_later(self.setup.tool_s, lambda: self._turn(rollout))
            return
        self.successes[rollout.number] = self.successes.get(rollout.number, 0) + 1
        self.completed += 1
        self._release(rollout, failed=False)

    def _replica_failed(self, rollout: _Rollout, error: ReplicaDown) -> None:
        self.router.failed_to_connect(rollout.replica)
        self.router.done(rollout.replica)
        if rollout.attempt >= self.setup.max_attempts:
            self.failed += 1
            self._release(rollout, failed=True)
            return
        self.retried += 1
        rollout.attempt += 1
        rollout.turn, rollout.tokens, rollout.prefixes = 0, 0, []
        self.queue.call_later(self.retry.delay(rollout.attempt - 1), lambda: self._turn(rollout))

    def _probed(self, index: int) -> None:
        if self.replicas[index].alive:
            self.router.up_again(index)

    def _release(self, rollout: _Rollout, failed: bool) -> None:
        self.limit.release(Outcome(rollout.admitted, self.queue.now() - rollout.started, 0, failed=failed))
        self._fill()

    def _load(self) -> FleetLoad:
        """The replicas' load as vllm_model's GET /engine_load reports it (a dead replica reads as idle)."""
        loads = []
        for replica in self.replicas:
            snap = replica.snapshot()
            loads.append({"running": snap.running, "waiting": snap.waiting, "preemptions": snap.stats.preempted,
                          "kv_cache_usage": replica.engine.context / replica.profile.kv_cache_tokens,
                          "capacity": replica.profile.kv_cache_tokens / self.setup.max_model_len})
        load = FleetLoad.of({"policy_model": loads})
        if load is None:
            raise RuntimeError(f"the simulated replicas' load is not in /engine_load's shape: {loads}")
        return load

    def _poll(self) -> None:
        assert self.engine_level is not None  # polled only then
        self.engine_level.observe(self._load(), self.limit.level, self.limit.in_flight)
        self.queue.call_later(POLL_S, self._poll)

    # -- measuring -----------------------------------------------------------------------------------------------

    def _sample(self) -> None:
        self._snap()
        self.queue.call_later(self.setup.sample_s, self._sample)

    def _snap(self) -> None:
        """Record the fleet's counters now, and the interval since the last record."""
        snaps = [replica.snapshot() for replica in self.replicas]
        t = self.queue.now()
        mark = (t, sum(s.stats.slot_s for s in snaps), sum(s.stats.output_tokens for s in snaps),
                sum(s.stats.prompt_tokens for s in snaps), sum(s.stats.cached_tokens for s in snaps),
                self.completed, sum(s.waiting for s in snaps))
        if self._marks and t > self._marks[-1][0]:
            last = self._marks[-1]
            span = t - last[0]
            self.samples.append(Sample(
                t=round(t, 3), level=self.limit.level, in_flight=self.limit.in_flight,
                utilization=(mark[1] - last[1]) / (self.setup.slots * span),
                rollouts_per_s=(mark[5] - last[5]) / span, output_tokens_per_s=(mark[2] - last[2]) / span,
                waiting=mark[6], replicas_up=sum(s.alive for s in snaps)))
        self._marks.append(mark)
        if self.policy is not None and self.hold_from_s is None and self.policy.mode == "hold":
            self.hold_from_s = t

    def _result(self) -> FleetResult:
        setup = self.setup
        start = setup.measure_from_s if setup.measure_from_s is not None else setup.duration_s / 2
        first = next(mark for mark in self._marks if mark[0] >= start)
        last = self._marks[-1]
        span = last[0] - first[0]
        prompt = last[3] - first[3]
        waiting = [sample.waiting for sample in self.samples if sample.t > first[0]]
        routing = self.router.snapshot()
        return FleetResult(
            setup=setup, window_s=(round(first[0], 3), round(last[0], 3)),
            rollouts_per_s=(last[5] - first[5]) / span, output_tokens_per_s=(last[2] - first[2]) / span,
            utilization=(last[1] - first[1]) / (setup.slots * span),
            prefix_hit_rate=(last[4] - first[4]) / prompt if prompt else 0.0,
            mean_waiting=sum(waiting) / len(waiting) if waiting else 0.0,
            final_level=self.limit.level, hold_from_s=self.hold_from_s, samples=self.samples,
            started=self.started, succeeded=len(self.successes), failed=self.failed,
            duplicates=sum(1 for count in self.successes.values() if count > 1), retried=self.retried,
            moved=routing.moved,
            lag_s=sum(r.lag_s for r in self.replicas) / max(1, sum(r.lagged for r in self.replicas)),
            knee_points=[(p.level, round(p.throughput, 3)) for p in self.policy.points] if self.policy else [])


def run_fleet(setup: FleetSetup) -> FleetResult:
    """Run `setup` in simulated time."""
    return _Fleet(setup).run()
