"""Continuous batching in simulated time: the scheduler of one vLLM replica, event by event.

At each step boundary the engine admits waiting requests in arrival order while it runs fewer than `max_num_seqs`
sequences and their KV cache fits; the first step of an admitted request also computes its uncached prompt tokens
and produces its first output token. Every step produces one token for each running sequence, so a sequence
finishes `output_tokens` steps after it was admitted. When the KV cache would overflow, the most recently admitted
sequence is preempted (vLLM's recompute preemption): it goes back to the front of the queue and, when admitted again,
computes its prompt and its output so far again.

Nothing is simulated token by token: between two events (an admission, a finish, a preemption) the batch does not
change and only its KV cache grows, by one token per sequence per step, so the time of n steps has a closed form
(`_span`) and the engine jumps from event to event. `advance(now)` simulates every whole step that ends by `now`;
requests are admitted at the first boundary at or after their arrival, whenever `advance` is called.
"""

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from benchmarks.fleet.prefix_cache import PrefixCache
from benchmarks.fleet.profile import ReplicaProfile

_EPS_S = 1e-9  # a step "ends by" a time it misses by float rounding only (next_finish_at sums steps differently)


@dataclass
class SimRequest:
    """A generation request as the engine sees it: token counts, not text."""

    prompt_tokens: int
    output_tokens: int
    prefixes: Sequence[tuple[int, int]] = ()  # (key, tokens) of the prompt's cacheable prefixes, shortest first
    done_key: int | None = None  # key of prompt + output, cached when it finishes (the next turn's prefix)
    tag: Any = None  # the caller's, handed back with the sequence


@dataclass(eq=False)
class Seq:
    """One request inside the engine."""

    request: SimRequest
    arrived_at: float
    admitted_at: float = -1.0
    finished_at: float = -1.0
    cached_tokens: int = 0  # prompt tokens the prefix cache gave at (first) admission
    generated: int = 0  # output tokens before the last admission (more than 0 after a preemption)
    start_step: int = 0  # the engine's step count when it was last admitted
    finish_step: int = 0
    preemptions: int = 0
    seq_id: int = 0

    @property
    def in_kv(self) -> int:
        """Tokens it held when admitted: its prompt and the output a preemption made it compute again."""
        return self.request.prompt_tokens + self.generated


@dataclass
class EngineStats:
    """Counters since the engine started, in simulated seconds and tokens."""

    busy_s: float = 0.0  # time with at least one running sequence
    slot_s: float = 0.0  # sum over time of running sequences (integral of the batch size)
    steps: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0  # of admitted requests (first admission)
    cached_tokens: int = 0  # of those, given by the prefix cache
    prefill_tokens: int = 0  # computed, recomputation after preemption included
    admitted: int = 0
    finished: int = 0
    preempted: int = 0
    wait_s: float = 0.0  # from arrival to first admission, summed over admitted requests

    def copy(self) -> "EngineStats":
        return EngineStats(**vars(self))


class BatchEngine:
    """One replica's scheduler and clock (see the module docstring)."""

    def __init__(self, profile: ReplicaProfile) -> None:
        self.retime(profile)
        self._kv = profile.kv_cache_tokens
        self.cache = PrefixCache(profile.block_tokens)
        self.stats = EngineStats()
        self.t = 0.0  # the current step boundary: everything before it is simulated
        self.steps = 0
        self.context = 0  # KV tokens the running sequences hold
        self.waiting: deque[Seq] = deque()
        self._running: dict[int, Seq] = {}  # in admission order: preemption takes the last
        self._finishing: list[tuple[int, int]] = []  # heap of (finish step, seq id)
        self._pending_prefill = 0  # prompt tokens the step starting at `t` computes
        self._ids = 0

    def retime(self, profile: ReplicaProfile) -> None:
        """Steps from the current boundary on take `profile`'s times (same KV cache: the GPU slowed down)."""
        self.profile = profile
        # The step time's terms with the slowdown in them (the hot paths compute steps inline from these).
        self._base_s = profile.slowdown * profile.base_s
        self._per_seq_s = profile.slowdown * profile.per_seq_s
        self._per_token_s = profile.slowdown * profile.per_context_token_s

    @property
    def batch(self) -> int:
        return len(self._running)

    def submit(self, request: SimRequest, now: float) -> Seq:
        """A request arriving at `now` (not before the current boundary); admitted by a later `advance`."""
        if request.prompt_tokens + request.output_tokens > self.profile.kv_cache_tokens:
            raise ValueError(f"a request of {request.prompt_tokens} + {request.output_tokens} tokens cannot fit the "
                             f"KV cache of {self.profile.kv_cache_tokens} tokens")
        self._ids += 1
        seq = Seq(request, arrived_at=max(now, self.t), seq_id=self._ids)
        if not self._running and not self.waiting:
            self.t = seq.arrived_at  # an idle engine starts a step as soon as a request comes
        self.waiting.append(seq)
        return seq

    def advance(self, now: float) -> list[Seq]:
        """Simulate every whole step that ends by `now`; the sequences that finished, in finishing order."""
        finished: list[Seq] = []
        limit = now + _EPS_S
        while True:
            if self.waiting:
                self._admit()
            batch = len(self._running)
            if not batch:
                if self.waiting and self.waiting[0].arrived_at <= now:
                    self.t = max(self.t, self.waiting[0].arrived_at)
                    continue
                return finished
            if self.context + batch > self._kv:
                self._preempt()
                continue
            if self._pending_prefill:  # the step that admitted sequences also computes their prompts
                first = self.profile.step_s(batch, self.context, self._pending_prefill)
                if self.t + first > limit:
                    return finished
                self._run(1, first)
            else:
                steps = self._steps_to_event()
                taken = min(steps, self._steps_within(now - self.t))
                if taken > 0:
                    self._run(taken, self._span(taken))
                if taken < steps:
                    return finished
            if self._finishing[0][0] <= self.steps:
                finished.extend(self._finish())

    def next_finish_at(self) -> float | None:
        """When the next running sequence finishes if nothing else is admitted (arrivals only make it later)."""
        if not self._running:
            return None
        steps = self._finishing[0][0] - self.steps
        time = self.t
        if self._pending_prefill:
            time += self.profile.step_s(self.batch, self.context, self._pending_prefill)
            return time + self._span(steps - 1, context=self.context + self.batch)
        return time + self._span(steps)

    def steps_left(self) -> int:
        """Steps until the next finish (0 when nothing runs)."""
        return self._finishing[0][0] - self.steps if self._running else 0

    def abort(self, seq: Seq) -> None:
        """Forget `seq` (its client went away, as vLLM aborts a request whose connection closed)."""
        if seq.seq_id in self._running:
            self._remove_running(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def drop_all(self) -> list[Seq]:
        """Everything running and waiting, removed (the replica died); its prefix cache is gone too."""
        dropped = [*self._running.values(), *self.waiting]
        self._running.clear()
        self._finishing.clear()
        self.waiting.clear()
        self.context = 0
        self._pending_prefill = 0
        self.cache.clear()
        return dropped

    # -- internals -------------------------------------------------------------------------------------------------

    def _admit(self) -> None:
        waiting, running, cache = self.waiting, self._running, self.cache
        admitted = False
        while waiting and len(running) < self.profile.max_num_seqs and waiting[0].arrived_at <= self.t:
            seq = waiting[0]
            if not self._can_admit(seq):
                break
            waiting.popleft()
            admitted = True
            request = seq.request
            cached = 0
            if seq.admitted_at < 0:  # first admission (not after a preemption)
                cached = min(cache.take(request.prefixes), request.prompt_tokens - 1)
                seq.cached_tokens = cached
                seq.admitted_at = self.t
                stats = self.stats
                stats.admitted += 1
                stats.prompt_tokens += request.prompt_tokens
                stats.cached_tokens += cached
                stats.wait_s += self.t - seq.arrived_at
            in_kv = seq.in_kv
            self._pending_prefill += in_kv - cached
            self.stats.prefill_tokens += in_kv - cached
            self.context += in_kv
            seq.start_step = self.steps
            seq.finish_step = self.steps + request.output_tokens - seq.generated
            running[seq.seq_id] = seq
            heapq.heappush(self._finishing, (seq.finish_step, seq.seq_id))
        if admitted:
            cache.shrink(self._kv - self.context)

    def _preempt(self) -> None:
        victim = self._running[next(reversed(self._running))]
        victim.generated += self._remove_running(victim)
        victim.preemptions += 1
        self.stats.preempted += 1
        self.waiting.appendleft(victim)

    def _remove_running(self, seq: Seq) -> int:
        """Take `seq` out of the batch, freeing its KV cache; the tokens it generated since its admission."""
        del self._running[seq.seq_id]
        done = self.steps - seq.start_step
        self.context -= seq.in_kv + done
        self._finishing = [(step, sid) for step, sid in self._finishing if sid != seq.seq_id]
        heapq.heapify(self._finishing)
        return done

    def _steps_to_event(self) -> int:
        """Whole steps from `t` to the next finish or KV overflow (at least 1)."""
        batch = len(self._running)
        steps = min(self._finishing[0][0] - self.steps, (self._kv - self.context) // batch)
        if steps < 1:
            steps = 1
        if self.waiting and self._can_admit(self.waiting[0]):
            steps = min(steps, self._steps_until(self.waiting[0].arrived_at))
        return steps

    def _can_admit(self, seq: Seq) -> bool:
        """Room for it in the batch, and KV cache for it and for one more step of every sequence with it."""
        batch = len(self._running)
        return batch < self.profile.max_num_seqs and self.context + seq.in_kv + batch + 1 <= self._kv

    def _span(self, steps: int, context: int | None = None) -> float:
        """Time of `steps` decode steps from `t` at the current batch (no prefill): the KV grows a token per sequence
        per step."""
        if steps <= 0:
            return 0.0
        batch = len(self._running)
        first = (self._base_s + self._per_seq_s * batch
                 + self._per_token_s * (self.context if context is None else context))
        return steps * first + self._per_token_s * batch * steps * (steps - 1) / 2

    def _steps_within(self, seconds: float) -> int:
        """The most whole decode steps from `t` that end within `seconds`."""
        seconds += _EPS_S
        if seconds <= 0:
            return 0
        batch = len(self._running)
        first = self._base_s + self._per_seq_s * batch + self._per_token_s * self.context
        growth = self._per_token_s * batch
        if growth <= 0:
            n = int(seconds / first)
        else:
            b = first - growth / 2
            n = int((-b + math.sqrt(b * b + 2 * growth * seconds)) / growth)
        # float rounding may put the root one step off either way
        while n > 0 and n * first + growth * n * (n - 1) / 2 > seconds:
            n -= 1
        while (n + 1) * first + growth * (n + 1) * n / 2 <= seconds:
            n += 1
        return n

    def _steps_until(self, when: float) -> int:
        """Whole steps from `t` until the first boundary at or after `when` (at least 1)."""
        n = self._steps_within(when - self.t)
        return max(1, n if self._span(n) >= when - self.t else n + 1)

    def _run(self, steps: int, seconds: float) -> None:
        batch = self.batch
        self.stats.busy_s += seconds
        self.stats.slot_s += batch * seconds
        self.stats.steps += steps
        self.stats.output_tokens += batch * steps
        self.context += batch * steps
        self.steps += steps
        self.t += seconds
        self._pending_prefill = 0

    def _finish(self) -> list[Seq]:
        finished = []
        finishing, running, steps = self._finishing, self._running, self.steps
        while finishing and finishing[0][0] <= steps:
            _, sid = heapq.heappop(finishing)
            seq = running.pop(sid)
            request = seq.request
            self.context -= request.prompt_tokens + request.output_tokens
            seq.finished_at = self.t
            self.stats.finished += 1
            if request.done_key is not None:
                self.cache.add(request.done_key, request.prompt_tokens + request.output_tokens, self._kv - self.context)
            finished.append(seq)
        return finished
