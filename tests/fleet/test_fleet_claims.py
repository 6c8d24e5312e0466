"""What the fleet benchmark claims, in simulated time (the same result on any machine): on 8 replicas the automatic
level reaches the best fixed level's throughput and fills the slots; on 4, load-aware routing beats hash routing by
far with one replica 2x slower, costs nothing with all equal and keeps the prefix cache's hits, and a replica killed
mid-run costs no rollout and none runs twice."""

from dataclasses import replace

import pytest

from benchmarks.fleet.inprocess import FleetResult, FleetSetup, run_fleet
from benchmarks.fleet.workload import MULTI_TURN, SINGLE_TURN

REPLICAS = 8
SLOTS = REPLICAS * 256
SMALL = 4  # replicas of the routing and failover checks


@pytest.fixture(scope="module")
def routing() -> dict[str, FleetResult]:
    base = FleetSetup(replicas=SMALL, workload=MULTI_TURN, duration_s=400.0, concurrency=SMALL * 256)
    return {f"{mode}{' slow' if slow else ''}": run_fleet(replace(base, routing=mode, slow=slow))
            for mode in ("hash", "load_aware") for slow in ((), ((0, 2.0),))}


def test_the_automatic_level_reaches_the_best_fixed_one_and_fills_the_fleet() -> None:
    base = FleetSetup(replicas=REPLICAS, workload=SINGLE_TURN, duration_s=200.0)
    best = max(run_fleet(replace(base, concurrency=level)).rollouts_per_s for level in (SLOTS, SLOTS * 5 // 4))
    automatic = run_fleet(replace(base, duration_s=800.0, measure_from_s=500.0))
    assert automatic.hold_from_s is not None and automatic.hold_from_s < 500.0
    assert automatic.rollouts_per_s >= 0.95 * best
    assert automatic.utilization >= 0.9
    assert run_fleet(replace(base, concurrency=256)).utilization < 0.2  # the old fixed default: an eighth full


def test_load_aware_routing_beats_hash_routing_with_one_replica_slower(routing: dict[str, FleetResult]) -> None:
    assert routing["load_aware slow"].rollouts_per_s >= 1.2 * routing["hash slow"].rollouts_per_s


def test_with_equal_replicas_load_aware_routing_costs_nothing(routing: dict[str, FleetResult]) -> None:
    assert routing["load_aware"].rollouts_per_s >= 0.98 * routing["hash"].rollouts_per_s
    assert routing["load_aware"].prefix_hit_rate >= 0.9 * routing["hash"].prefix_hit_rate
    assert routing["load_aware slow"].prefix_hit_rate >= 0.9 * routing["hash slow"].prefix_hit_rate


def test_a_killed_replica_costs_no_rollout() -> None:
    result = run_fleet(FleetSetup(replicas=SMALL, workload=MULTI_TURN, duration_s=500.0, concurrency=SMALL * 256,
                                  kill=(3, 200.0, 300.0), measure_from_s=350.0))
    assert result.retried > 0  # the killed replica's sessions were running
    assert (result.failed, result.duplicates) == (0, 0)
    assert result.succeeded + SMALL * 256 == result.started  # the rest were in flight at the end
    assert all(sample.replicas_up == SMALL for sample in result.samples if sample.t > 300.0)
    assert result.utilization >= 0.95  # back to full once the replica returned
