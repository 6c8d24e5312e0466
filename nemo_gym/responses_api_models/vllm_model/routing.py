"""Which vLLM replica serves a request: sticky while the replica keeps up, else the least loaded one that is up.

`load_aware` (the default):
- A session (the rollout's `x-ng-session-id`) stays on the replica that served its last turn, whose prefix cache
  holds the conversation so far, while that replica is up and not overloaded: overloaded is more requests in flight
  than `OVERLOAD_FACTOR` times the mean over the replicas that are up, plus `OVERLOAD_SLACK` (the bound of
  "consistent hashing with bounded loads", Mirrokni et al. 2018). A replica that is slower than the others
  collects requests in flight, so it crosses the bound and stops taking more than its share.
- A new session, or one whose replica is down or overloaded, goes to the replica with the fewest requests in
  flight (ties broken by a hash of the session, so equal replicas share new sessions evenly). A moved session loses
  its cached prefix once, on the replica it left.
- A request that fails to connect marks its replica down: it gets no requests until a probe (`GET <base>/models`,
  every `PROBE_INTERVAL_S` while it is down) finds it answering again; then it is the least loaded and takes new
  sessions at once. The failed request itself is not sent again here: the collector owns the rollout's one retry
  budget (docs/architecture.md), and its next attempt is a new session, routed among the replicas that are up.

`hash`: a session always goes to the first replica that is up in its own order of the replicas (rendezvous
hashing), whatever their load: the routing of NeMo Gym and of consistent hashing, kept for comparison and for
setups that want the placement fixed.

The model server runs several worker processes, and the kernel spreads connections (not sessions) over them, so a
session's turns reach different workers. The routing state is therefore one table for the whole server, in an
anonymous shared memory mapping with a process-shared lock: the requests in flight and the up/down state of each
replica, and the session table (set-associative, least recently used out; a session that falls out is routed as a
new one). The launcher builds its server object before it forks the workers (nemo_gym.server.launch), so the state
made for the first object is inherited by every worker, which finds it by the server's name (`shared_router`), as
the endpoint rate limits are shared (responses_api_models/rate_limits.py).
"""

import hashlib
import mmap
import multiprocessing
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Literal

from nemo_gym.failures import FailureClass, RequestFailed

RoutingMode = Literal["load_aware", "hash"]
OVERLOAD_FACTOR = 1.25
OVERLOAD_SLACK = 4
PROBE_INTERVAL_S = 1.0
SESSION_BUCKETS = 1 << 15
SESSION_WAYS = 4
_MASK64 = (1 << 64) - 1
# Per replica: requests in flight, down (0/1), when the next probe of a down replica is due (monotonic seconds,
# one clock for every process), times it was marked down. Counters: sessions placed new, turns kept on their
# replica, sessions moved (their replica overloaded or down), and the session table's recency clock.
_REPLICA_FIELDS = 4
_IN_FLIGHT, _DOWN, _PROBE_AT, _DOWNS = range(_REPLICA_FIELDS)
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
class RoutingSnapshot:
    in_flight: list[int]
    down: list[bool]
    downs: list[int]  # times each replica was marked down
    placed: int
    kept: int
    moved: int


class _SharedTable:
    """The routing state of one model server, in memory its forked workers share (see the module docstring)."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        slots = SESSION_BUCKETS * SESSION_WAYS
        sizes = (8 * replicas * _REPLICA_FIELDS, 8 * len(_COUNTERS), 8 * slots, 8 * slots)
        self._page = mmap.mmap(-1, sum(sizes))  # anonymous and MAP_SHARED: a fork maps the same memory
        view, offset = memoryview(self._page), 0
        parts = []
        for size in sizes:
            parts.append(view[offset:offset + size])
            offset += size
        self.replica = parts[0].cast("d")  # doubles: counts stay exact far beyond any load
        self.counters = parts[1].cast("q")
        self.fingerprints = parts[2].cast("Q")
        self.owners = parts[3].cast("q")  # (recency stamp << 16) | replica index
        self.lock = multiprocessing.get_context("fork").Lock()


class ReplicaRouter:
    """Picks a replica per request and counts the requests in flight on each (see the module docstring)."""

    def __init__(self, replicas: int, mode: RoutingMode = "load_aware", *, overload_factor: float = OVERLOAD_FACTOR,
                 overload_slack: int = OVERLOAD_SLACK, probe_interval_s: float = PROBE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`clock` times the probes: monotonic seconds, one clock for every process (a simulation passes its
        own)."""
        if replicas < 1:
            raise ValueError("a router needs at least one replica")
        if replicas >= 1 << 16:
            raise ValueError(f"at most {(1 << 16) - 1} replicas, got {replicas}")
        self.replicas = replicas
        self.mode = mode
        self.overload_factor = overload_factor
        self.overload_slack = overload_slack
        self.probe_interval_s = probe_interval_s
        self.clock = clock
        self._table = _SharedTable(replicas)
        self._round_robin = 0

    # -- routing -------------------------------------------------------------------------------------------------

    def pick(self, session: str | None) -> int:
        """The replica for a request of `session` (None: no session, the least loaded); counted in flight until
        `done`."""
        table = self._table
        fingerprint = session_fingerprint(session) if session else 0
        with table.lock:
            up = [i for i in range(self.replicas) if not table.replica[i * _REPLICA_FIELDS + _DOWN]]
            candidates = up or list(range(self.replicas))  # all down: try anyway, a request finds out quickest
            if self.mode == "hash":
                index = self._first_in_order(fingerprint, candidates) if fingerprint else self._next(candidates)
            else:
                index = self._load_aware(fingerprint, candidates)
            table.replica[index * _REPLICA_FIELDS + _IN_FLIGHT] += 1
        return index

    @contextmanager
    def routed(self, session: str | None) -> Iterator[int]:
        """`pick` for the length of one request: in flight until it ends; a connection failure marks the replica
        down (and still fails the request: its retry is the collector's)."""
        index = self.pick(session)
        try:
            yield index
        except RequestFailed as exc:
            if exc.failure_class == FailureClass.CONNECT:
                self.failed_to_connect(index)
            raise
        finally:
            self.done(index)

    def done(self, index: int) -> None:
        """A request picked for `index` ended (answered or failed)."""
        with self._table.lock:
            self._table.replica[index * _REPLICA_FIELDS + _IN_FLIGHT] -= 1

    def failed_to_connect(self, index: int) -> None:
        """`index` refused or dropped a connection: down until a probe finds it up."""
        table = self._table
        with table.lock:
            base = index * _REPLICA_FIELDS
            if not table.replica[base + _DOWN]:
                table.replica[base + _DOWN] = 1.0
                table.replica[base + _DOWNS] += 1
                table.replica[base + _PROBE_AT] = self.clock() + self.probe_interval_s

    def due_probes(self) -> list[int]:
        """Down replicas whose probe is due, each claimed for one caller (its next probe pushed back an interval)."""
        table = self._table
        if not any(table.replica[i * _REPLICA_FIELDS + _DOWN] for i in range(self.replicas)):
            return []  # the usual case, answered without the lock
        now = self.clock()
        due = []
        with table.lock:
            for i in range(self.replicas):
                base = i * _REPLICA_FIELDS
                if table.replica[base + _DOWN] and table.replica[base + _PROBE_AT] <= now:
                    table.replica[base + _PROBE_AT] = now + self.probe_interval_s
                    due.append(i)
        return due

    def up_again(self, index: int) -> None:
        """A probe found `index` answering: it takes requests again."""
        with self._table.lock:
            self._table.replica[index * _REPLICA_FIELDS + _DOWN] = 0.0

    def snapshot(self) -> RoutingSnapshot:
        table = self._table
        with table.lock:
            fields = [[table.replica[i * _REPLICA_FIELDS + f] for i in range(self.replicas)]
                      for f in range(_REPLICA_FIELDS)]
            placed, kept, moved = (table.counters[k] for k in range(3))
        return RoutingSnapshot(in_flight=[int(x) for x in fields[_IN_FLIGHT]], down=[bool(x) for x in fields[_DOWN]],
                               downs=[int(x) for x in fields[_DOWNS]], placed=placed, kept=kept, moved=moved)

    # -- under the lock ------------------------------------------------------------------------------------------

    def _load_aware(self, fingerprint: int, candidates: list[int]) -> int:
        table = self._table
        loads = [table.replica[i * _REPLICA_FIELDS + _IN_FLIGHT] for i in candidates]
        placed = self._placed(fingerprint) if fingerprint else None
        if placed is not None and placed in candidates:
            bound = self.overload_factor * sum(loads) / len(candidates) + self.overload_slack
            if table.replica[placed * _REPLICA_FIELDS + _IN_FLIGHT] < bound:
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


_SHARED: dict[tuple[str, int, str], ReplicaRouter] = {}


def shared_router(server: str, replicas: int, mode: RoutingMode) -> ReplicaRouter:
    """The router of model server `server`: made once per process tree, so the server's worker processes share
    it (see the module docstring)."""
    key = (server, replicas, mode)
    if key not in _SHARED:
        _SHARED[key] = ReplicaRouter(replicas, mode)
    return _SHARED[key]
