"""Which vLLM replica serves a request: sticky while the replica keeps up, else the least loaded one in service; a
replica that fails while its peers answer is ejected for a while (outlier detection, as in Envoy and nginx).

`load_aware` (the default):
- A session (the rollout's `x-ng-session-id`) stays on the replica that served its last turn, whose prefix cache
  holds the conversation so far, while that replica is in service and not overloaded: overloaded is more requests in
  flight than `OVERLOAD_FACTOR` times the mean over the replicas in service, plus `OVERLOAD_SLACK` (the bound of
  "consistent hashing with bounded loads", Mirrokni et al. 2018). A replica that is slower than the others
  collects requests in flight, so it crosses the bound and stops taking more than its share.
- A new session, or one whose replica is out or overloaded, goes to the replica with the fewest requests in flight
  (ties broken by a hash of the session, so equal replicas share new sessions evenly). A moved session loses its
  cached prefix once, on the replica it left.

Out of service, two ways:
- Down: a request that fails to connect (refused, or closed before any reply) marks its replica down; a probe
  (`GET <base>/models`, every `PROBE_INTERVAL_S` while it is down) brings it back: a process that was gone listens
  again.
- Ejected: a replica that answers badly (5xx, a reply that is not one, no answer in time: `HEALTH_CLASSES`) is
  ejected after `OutlierRules.consecutive_failures` such failures in a row, or when its recent failure rate (an
  exponential mean over about `RATE_WINDOW` requests) passes `failure_rate` and is `RATE_FACTOR` times its peers';
  one that answers, but with a mean latency `slow_factor` times the median of its peers' (after `SLOW_MIN_ANSWERS`
  answers), is ejected too.
  It stays out for `ejection_base_s`, doubled for each ejection that follows within `STRIKE_MEMORY_S` of the last
  one ending (at most `ejection_max_s`); then one real request is its probe: answered, the replica is back in
  service; failed, it is ejected again for longer. A `/models` probe cannot tell a gateway in front of a dead engine
  from a healthy replica, a real request can.
At most `max_ejected_share` of the replicas are out at once (down counts); beyond it a failing replica stays in
service, so a fleet-wide failure shows as failed requests, not as an empty fleet, and a replica that goes down while
the share is out readmits the ejected one due back soonest. With every replica out, requests try them anyway.

A replica that accepts requests and never answers is found by hang_watch.py: its requests time out there, which
counts towards ejection.

`hash`: a session always goes to the first replica in service in its own order of the replicas (rendezvous hashing),
whatever their load: the routing of NeMo Gym and of consistent hashing. No setting selects it; it is the baseline the
fleet benchmark (benchmarks/perf/fleet.py) measures `load_aware` against.

The model server runs several worker processes, and the kernel spreads connections (not sessions) over them, so a
session's turns reach different workers. The routing state is therefore one table for the whole server, in an
anonymous shared memory mapping with a process-shared lock: each replica's requests in flight, its health and its
counters, and the session table (set-associative, least recently used out; a session that falls out is routed as a
new one). The launcher builds its server object before it forks the workers (nemo_gym.server.launch), so the state
made for the first object is inherited by every worker, which finds it by the server's name (`shared_router`), as
the endpoint rate limits are shared (responses_api_models/rate_limits.py).
"""

import hashlib
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Literal

from nemo_gym.config.model_servers import OutlierRules
from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.server.fork_shared import SharedPage, made_once

RoutingMode = Literal["load_aware", "hash"]
OVERLOAD_FACTOR = 1.25
OVERLOAD_SLACK = 4
PROBE_INTERVAL_S = 1.0
SESSION_BUCKETS = 1 << 15
SESSION_WAYS = 4
# Failures that say something about the replica (not about the request, nor the endpoint's rate limits).
HEALTH_CLASSES = frozenset({FailureClass.TIMEOUT, FailureClass.HTTP_5XX, FailureClass.INVALID_RESPONSE})
RATE_WINDOW = 20  # the failure rate's exponential mean weighs about this many recent requests
RATE_MIN_REQUESTS = 10  # requests since a replica came into service before its rate can eject it
RATE_FACTOR = 3.0
LATENCY_WEIGHT = 0.2  # of each answered request in its replica's mean latency
SLOW_MIN_ANSWERS = 5  # answers since a replica came into service before its latency can eject it
# A mean latency within this of the peers' median is never too slow, whatever the ratio: at a few milliseconds, one
# pause of a busy machine's scheduler is a large factor, and says nothing about the replica.
SLOW_MARGIN_S = 0.5
STRIKE_MEMORY_S = 120.0  # an ejection this long after the last one ended starts the backoff again
_MASK64 = (1 << 64) - 1
_CLASSES = tuple(FailureClass)

# Per replica (doubles; times on the router's clock): in flight; down (0/1); when the next probe of a down replica is
# due; times marked down; ejected until (0: not ejected); a probe request out (0/1); ejections; strikes (the
# backoff's exponent); when the last ejection ended; when the last began; failures in a row; failure rate; requests
# since it came into service; requests; answered; when it last answered; its mean latency (exponential, since it came
# into service); then failures per class.
_FIELDS = ("in_flight", "down", "probe_at", "downs", "ejected_until", "probing", "ejections", "strikes",
           "ejection_ended", "ejected_at", "consecutive", "failure_rate", "since_admitted", "requests", "answered",
           "answered_at", "latency")
(_IN_FLIGHT, _DOWN, _PROBE_AT, _DOWNS, _EJECTED_UNTIL, _PROBING, _EJECTIONS, _STRIKES, _EJECTION_ENDED, _EJECTED_AT,
 _CONSECUTIVE, _FAILURE_RATE, _SINCE_ADMITTED, _REQUESTS, _ANSWERED, _ANSWERED_AT, _LATENCY) = range(len(_FIELDS))
_REPLICA_FIELDS = len(_FIELDS) + len(_CLASSES)
# Counters: sessions placed new, turns kept on their replica, sessions moved (their replica overloaded or out), and
# the session table's recency clock.
_COUNTERS = ("placed", "kept", "moved", "clock")


def _mix(x: int) -> int:
    """splitmix64's finalizer: a well-spread 64-bit function of `x`."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def session_fingerprint(session: str) -> int:
    """A stable, non-zero 64-bit name of `session` (the same in every process and every run)."""
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "little") or 1


@dataclass(frozen=True)
class ReplicaStats:
    """One replica's health and counters, as `GET /replicas` and the progress file show them."""

    state: Literal["in_service", "down", "ejected", "probing"]
    in_flight: int
    requests: int
    answered: int
    failures: dict[str, int]  # by failure class, those met at least once
    ejections: int
    downs: int
    latency_s: float  # its mean latency since it came into service (exponential; 0: none yet)
    ejected_for_s: float  # until its probe may go (0 unless ejected)
    last_ejected_s_ago: float | None


@dataclass(frozen=True)
class RoutingSnapshot:
    in_flight: list[int]
    down: list[bool]
    downs: list[int]  # times each replica was marked down
    placed: int
    kept: int
    moved: int
    replicas: list[ReplicaStats]


class _SharedTable:
    """The routing state of one model server, in memory its forked workers share (see the module docstring)."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        slots = SESSION_BUCKETS * SESSION_WAYS
        sizes = (8 * replicas * _REPLICA_FIELDS, 8 * len(_COUNTERS), 8 * slots, 8 * slots)
        self._shared = SharedPage(sum(sizes))
        view, offset = memoryview(self._shared.memory), 0
        parts = []
        for size in sizes:
            parts.append(view[offset:offset + size])
            offset += size
        self.replica = parts[0].cast("d")  # doubles: counts stay exact far beyond any load
        self.counters = parts[1].cast("q")
        self.fingerprints = parts[2].cast("Q")
        self.owners = parts[3].cast("q")  # (recency stamp << 16) | replica index
        self.lock = self._shared.lock


class ReplicaRouter:
    """Picks a replica per request, counts the requests in flight on each and ejects outliers (module docstring)."""

    def __init__(self, replicas: int, mode: RoutingMode = "load_aware", *, overload_factor: float = OVERLOAD_FACTOR,
                 overload_slack: int = OVERLOAD_SLACK, probe_interval_s: float = PROBE_INTERVAL_S,
                 rules: OutlierRules = OutlierRules(), clock: Callable[[], float] = time.monotonic) -> None:
        """`clock` times the probes and ejections: monotonic seconds, one clock for every process (a simulation
        passes its own)."""
        if replicas < 1:
            raise ValueError("a router needs at least one replica")
        if replicas >= 1 << 16:
            raise ValueError(f"at most {(1 << 16) - 1} replicas, got {replicas}")
        self.replicas = replicas
        self.mode = mode
        self.overload_factor = overload_factor
        self.overload_slack = overload_slack
        self.probe_interval_s = probe_interval_s
        self.rules = rules
        self.clock = clock
        self.max_out = math.floor(rules.max_ejected_share * replicas + 1e-9)
        self._table = _SharedTable(replicas)
        self._round_robin = 0

    def _get(self, index: int, field: int) -> float:
        return self._table.replica[index * _REPLICA_FIELDS + field]

    def _set(self, index: int, field: int, value: float) -> None:
        self._table.replica[index * _REPLICA_FIELDS + field] = value

    def _add(self, index: int, field: int, value: float = 1.0) -> None:
        self._table.replica[index * _REPLICA_FIELDS + field] += value

    # -- routing -------------------------------------------------------------------------------------------------

    def pick(self, session: str | None, avoid: tuple[int, ...] = ()) -> int:
        """The replica for a request of `session` (None: no session, the least loaded), other than those in `avoid`
        where one is left; counted in flight until `done`. A replica whose ejection is over gets this request as its
        probe."""
        table = self._table
        fingerprint = session_fingerprint(session) if session else 0
        with table.lock:
            now = self.clock()
            free = [i for i in range(self.replicas) if i not in avoid] or list(range(self.replicas))
            candidates = [i for i in free if self._takes_requests(i, now)]
            candidates = candidates or free  # all out: try anyway, a request finds out quickest
            if self.mode == "hash":
                index = self._first_in_order(fingerprint, candidates) if fingerprint else self._next(candidates)
            else:
                index = self._load_aware(fingerprint, candidates)
            if self._get(index, _EJECTED_UNTIL):
                self._set(index, _PROBING, 1.0)
            self._add(index, _IN_FLIGHT)
        return index

    def in_service_besides(self, tried: tuple[int, ...]) -> bool:
        """Whether a replica that takes requests is left outside `tried` (where a failed request may go next)."""
        now = self.clock()
        with self._table.lock:
            return any(self._takes_requests(i, now) for i in range(self.replicas) if i not in tried)

    @contextmanager
    def routed(self, session: str | None, avoid: tuple[int, ...] = ()) -> Iterator[int]:
        """`pick` for the length of one request: in flight until it ends, its outcome counted for its replica."""
        index = self.pick(session, avoid)
        sent_at = self.clock()
        try:
            yield index
        except RequestFailed as exc:
            self.failed(index, exc.failure_class)
            raise
        except BaseException:
            self.abandoned(index)
            raise
        else:
            self.answered(index, self.clock() - sent_at)
        finally:
            self.done(index)

    def done(self, index: int) -> None:
        """A request picked for `index` ended (answered or failed)."""
        with self._table.lock:
            self._add(index, _IN_FLIGHT, -1.0)

    def answered(self, index: int, latency_s: float | None = None) -> None:
        """A request to `index` was answered (in `latency_s`): a probe answered in time brings the replica back; a
        replica far slower than its peers is ejected."""
        with self._table.lock:
            now = self.clock()
            self._add(index, _REQUESTS)
            self._add(index, _ANSWERED)
            self._set(index, _ANSWERED_AT, max(now, self._get(index, _ANSWERED_AT)))
            self._set(index, _CONSECUTIVE, 0.0)
            self._set(index, _FAILURE_RATE, self._get(index, _FAILURE_RATE) * (1 - 1 / RATE_WINDOW))
            self._add(index, _SINCE_ADMITTED)
            if latency_s is not None:
                mean = self._get(index, _LATENCY)
                self._set(index, _LATENCY, latency_s if not mean else mean + LATENCY_WEIGHT * (latency_s - mean))
            if self._get(index, _PROBING):
                if latency_s is not None and self._too_slow(index, latency_s, now):
                    self._eject(index, now)
                else:
                    self._readmit(index, now)
            elif (not self._get(index, _EJECTED_UNTIL) and self._get(index, _SINCE_ADMITTED) >= SLOW_MIN_ANSWERS
                  and self._too_slow(index, self._get(index, _LATENCY), now) and self._may_take_out(now)):
                self._eject(index, now)

    def abandoned(self, index: int) -> None:
        """A request to `index` ended with neither answer nor failure (its caller went away): a probe may go again."""
        with self._table.lock:
            self._set(index, _PROBING, 0.0)

    def failed(self, index: int, failure_class: FailureClass) -> None:
        """A request to `index` failed with `failure_class`: counted, and the replica taken out if it must be."""
        if failure_class == FailureClass.CONNECT:
            self.failed_to_connect(index)
            return
        with self._table.lock:
            now = self.clock()
            self._add(index, _REQUESTS)
            self._add(index, len(_FIELDS) + _CLASSES.index(failure_class))
            if failure_class not in HEALTH_CLASSES:
                if self._get(index, _PROBING):  # the probe said nothing about the replica
                    self._set(index, _PROBING, 0.0)
                return
            self._add(index, _CONSECUTIVE)
            rate = self._get(index, _FAILURE_RATE) * (1 - 1 / RATE_WINDOW) + 1 / RATE_WINDOW
            self._set(index, _FAILURE_RATE, rate)
            self._add(index, _SINCE_ADMITTED)
            if self._get(index, _PROBING):
                self._eject(index, now)  # already out: no share to check
            elif not self._get(index, _EJECTED_UNTIL) and self._is_outlier(index, now) and self._may_take_out(now):
                self._eject(index, now)

    def failed_to_connect(self, index: int) -> None:
        """`index` refused or dropped a connection: down until a probe finds it up."""
        with self._table.lock:
            now = self.clock()
            self._add(index, _REQUESTS)
            self._add(index, len(_FIELDS) + _CLASSES.index(FailureClass.CONNECT))
            if not self._get(index, _DOWN):
                self._set(index, _DOWN, 1.0)
                self._add(index, _DOWNS)
                self._set(index, _PROBE_AT, now + self.probe_interval_s)
                # Down takes over from an ejection: the process is gone, its return is what matters.
                if self._get(index, _EJECTED_UNTIL):
                    self._readmit(index, now)
                self._readmit_beyond_share(now)

    def due_probes(self) -> list[int]:
        """Down replicas whose probe is due, each claimed for one caller (its next probe pushed back an interval)."""
        table = self._table
        if not any(self._get(i, _DOWN) for i in range(self.replicas)):
            return []  # the usual case, answered without the lock
        due = []
        with table.lock:
            now = self.clock()
            for i in range(self.replicas):
                if self._get(i, _DOWN) and self._get(i, _PROBE_AT) <= now:
                    self._set(i, _PROBE_AT, now + self.probe_interval_s)
                    due.append(i)
        return due

    def up_again(self, index: int) -> None:
        """A probe found `index` answering: it takes requests again."""
        with self._table.lock:
            self._set(index, _DOWN, 0.0)

    def last_answered(self, index: int) -> float:
        """When `index` last answered a request (the router's clock; 0: never)."""
        return self._get(index, _ANSWERED_AT)

    def on_probation(self, index: int) -> bool:
        """Whether `index` is ejected (its one request, if any, is its probe)."""
        return bool(self._get(index, _EJECTED_UNTIL))

    def peer_answers(self, index: int, within_s: float) -> bool:
        """Whether a replica in service besides `index` answered within `within_s`, or has answered and now has
        nothing to answer (idle at the end of a run): the fleet works, whatever `index` does."""
        now = self.clock()
        with self._table.lock:
            for i in range(self.replicas):
                at = self._get(i, _ANSWERED_AT)
                if i == index or not at or not self._takes_requests(i, now):
                    continue
                if now - at <= within_s or not self._get(i, _IN_FLIGHT):
                    return True
        return False

    def snapshot(self) -> RoutingSnapshot:
        table = self._table
        with table.lock:
            now = self.clock()
            replicas = [self._stats(i, now) for i in range(self.replicas)]
            placed, kept, moved = (table.counters[k] for k in range(3))
        return RoutingSnapshot(in_flight=[r.in_flight for r in replicas], down=[r.state == "down" for r in replicas],
                               downs=[r.downs for r in replicas], placed=placed, kept=kept, moved=moved,
                               replicas=replicas)

    # -- under the lock ------------------------------------------------------------------------------------------

    def _takes_requests(self, index: int, now: float) -> bool:
        """In service, or its ejection over and no probe out yet."""
        if self._get(index, _DOWN):
            return False
        until = self._get(index, _EJECTED_UNTIL)
        return not until or (now >= until and not self._get(index, _PROBING))

    def _is_outlier(self, index: int, now: float) -> bool:
        if self._get(index, _CONSECUTIVE) >= self.rules.consecutive_failures:
            return True
        rate = self._get(index, _FAILURE_RATE)
        if self._get(index, _SINCE_ADMITTED) < RATE_MIN_REQUESTS or rate < self.rules.failure_rate:
            return False
        peers = [self._get(i, _FAILURE_RATE) for i in range(self.replicas)
                 if i != index and self._takes_requests(i, now)]
        return not peers or rate >= RATE_FACTOR * sum(peers) / len(peers)

    def _too_slow(self, index: int, latency_s: float, now: float) -> bool:
        """Whether `latency_s` is `slow_factor` times the median of the mean latencies of the other replicas in
        service."""
        peers = sorted(self._get(i, _LATENCY) for i in range(self.replicas)
                       if i != index and self._get(i, _LATENCY) and self._takes_requests(i, now))
        if not self.rules.slow_factor or not peers:
            return False
        median = peers[len(peers) // 2]
        return latency_s > max(self.rules.slow_factor * median, median + SLOW_MARGIN_S)

    def _out(self) -> int:
        """Replicas out of service: down or ejected (an ejection over but not yet probed counts)."""
        return sum(1 for i in range(self.replicas) if self._get(i, _DOWN) or self._get(i, _EJECTED_UNTIL))

    def _may_take_out(self, now: float) -> bool:
        return self._out() + 1 <= self.max_out

    def _readmit_beyond_share(self, now: float) -> None:
        """Readmit ejected replicas, the one due back soonest first, while more than `max_out` are out: a replica
        that went down is gone for sure, one ejected may only have been slow, and the share holds for both."""
        out = self._out()
        ejected = sorted((self._get(i, _EJECTED_UNTIL), i) for i in range(self.replicas)
                         if self._get(i, _EJECTED_UNTIL) and not self._get(i, _DOWN))
        for _, index in ejected[:max(0, out - self.max_out)]:
            self._readmit(index, now)

    def _eject(self, index: int, now: float) -> None:
        ended = self._get(index, _EJECTION_ENDED)
        strikes = self._get(index, _STRIKES)
        if ended and not self._get(index, _PROBING) and now - ended > STRIKE_MEMORY_S:
            strikes = 0.0
        strikes += 1
        backoff = min(self.rules.ejection_max_s, self.rules.ejection_base_s * 2 ** (strikes - 1))
        self._set(index, _STRIKES, strikes)
        self._set(index, _EJECTED_UNTIL, now + backoff)
        self._set(index, _EJECTED_AT, now)
        self._set(index, _PROBING, 0.0)
        self._set(index, _CONSECUTIVE, 0.0)
        self._add(index, _EJECTIONS)

    def _readmit(self, index: int, now: float) -> None:
        for field in (_EJECTED_UNTIL, _PROBING, _CONSECUTIVE, _FAILURE_RATE, _SINCE_ADMITTED, _LATENCY):
            self._set(index, field, 0.0)
        self._set(index, _EJECTION_ENDED, now)

    def _stats(self, index: int, now: float) -> ReplicaStats:
        until = self._get(index, _EJECTED_UNTIL)
        state: Literal["in_service", "down", "ejected", "probing"] = "in_service"
        if self._get(index, _DOWN):
            state = "down"
        elif self._get(index, _PROBING):
            state = "probing"
        elif until:
            state = "ejected"
        failures = {cls.value: int(n) for cls, n in
                    zip(_CLASSES, (self._get(index, len(_FIELDS) + k) for k in range(len(_CLASSES)))) if n}
        ejected_at = self._get(index, _EJECTED_AT)
        return ReplicaStats(state=state, in_flight=int(self._get(index, _IN_FLIGHT)),
                            requests=int(self._get(index, _REQUESTS)), answered=int(self._get(index, _ANSWERED)),
                            failures=failures, ejections=int(self._get(index, _EJECTIONS)),
                            downs=int(self._get(index, _DOWNS)), latency_s=round(self._get(index, _LATENCY), 4),
                            ejected_for_s=round(max(0.0, until - now), 3),
                            last_ejected_s_ago=round(now - ejected_at, 3) if ejected_at else None)

    def _load_aware(self, fingerprint: int, candidates: list[int]) -> int:
        table = self._table
        loads = [self._get(i, _IN_FLIGHT) for i in candidates]
        placed = self._placed(fingerprint) if fingerprint else None
        if placed is not None and placed in candidates:
            bound = self.overload_factor * sum(loads) / len(candidates) + self.overload_slack
            if self._get(placed, _IN_FLIGHT) < bound:
                table.counters[1] += 1
                self._place(fingerprint, placed)
                return placed
        least = min(loads)
        tied = [i for i, load in zip(candidates, loads) if load == least]
        index = self._first_in_order(fingerprint, tied) if fingerprint else self._next(tied)
        if fingerprint:
            table.counters[0 if placed is None else 2] += 1
            self._place(fingerprint, index)
        return index

    def _first_in_order(self, fingerprint: int, candidates: list[int]) -> int:
        """The candidate `fingerprint` ranks first (rendezvous hashing: the same choice in every process)."""
        return max(candidates, key=lambda i: _mix(fingerprint ^ (i + 1) * 0x9E3779B97F4A7C15 & _MASK64))

    def _next(self, candidates: list[int]) -> int:
        self._round_robin += 1
        return candidates[self._round_robin % len(candidates)]

    def _placed(self, fingerprint: int) -> int | None:
        table = self._table
        start = fingerprint % SESSION_BUCKETS * SESSION_WAYS
        for slot in range(start, start + SESSION_WAYS):
            if table.fingerprints[slot] == fingerprint:
                return table.owners[slot] & 0xFFFF
        return None

    def _place(self, fingerprint: int, index: int) -> None:
        """Record `fingerprint` on `index`, in its own slot or in place of the bucket's least recently used."""
        table = self._table
        table.counters[3] += 1
        owner = table.counters[3] << 16 | index
        start = fingerprint % SESSION_BUCKETS * SESSION_WAYS
        victim = start
        for slot in range(start, start + SESSION_WAYS):
            if table.fingerprints[slot] == fingerprint:
                victim = slot
                break
            if table.owners[slot] >> 16 < table.owners[victim] >> 16:
                victim = slot
        table.fingerprints[victim] = fingerprint
        table.owners[victim] = owner


async def probe(router: ReplicaRouter, index: int, check: Callable[[], Awaitable[object]]) -> bool:
    """Run `check` (a request to down replica `index`); if it answers, the replica takes requests again."""
    try:
        await check()
    except RequestFailed:
        return False
    router.up_again(index)
    return True


def shared_router(server: str, replicas: int, mode: RoutingMode, rules: OutlierRules = OutlierRules()) -> ReplicaRouter:
    """The router of model server `server`: made once per process tree, so the server's worker processes share
    it (see the module docstring)."""
    return made_once(("replica router", server, replicas, mode, rules),
                     lambda: ReplicaRouter(replicas, mode, rules=rules))
