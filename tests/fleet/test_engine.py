"""The simulated replica's scheduler against its own model: closed-form throughput at fixed concurrency, the batch
and KV limits, preemption, and the prefix cache. Simulated time only: no wall clock, no machine load."""

import random

import pytest

from benchmarks.fleet.analytic import closed_loop, requests_per_s
from benchmarks.fleet.engine import BatchEngine, SimRequest
from benchmarks.fleet.profile import H100_LLAMA_8B


@pytest.mark.parametrize("concurrency", [1, 16, 128, 256])
@pytest.mark.parametrize("slowdown", [1.0, 2.0])
def test_fixed_concurrency_gives_the_analytic_throughput(concurrency: int, slowdown: float) -> None:
    profile = H100_LLAMA_8B.slower(slowdown) if slowdown != 1.0 else H100_LLAMA_8B
    engine = BatchEngine(profile)
    duration = 900.0
    done = closed_loop(engine, concurrency, lambda n: SimRequest(prompt_tokens=512, output_tokens=256), duration)
    measured = done / duration
    expected = requests_per_s(profile, concurrency, 512, 256)
    assert measured == pytest.approx(expected, rel=0.05)
    assert engine.stats.slot_s / engine.stats.busy_s == pytest.approx(concurrency)  # every slot held all along


def test_a_slower_replica_takes_twice_as_long() -> None:
    fast = requests_per_s(H100_LLAMA_8B, 64, 512, 256)
    assert requests_per_s(H100_LLAMA_8B.slower(2.0), 64, 512, 256) == pytest.approx(fast / 2)


def test_beyond_max_num_seqs_requests_queue() -> None:
    engine = BatchEngine(H100_LLAMA_8B)
    rng = random.Random(1)
    done = closed_loop(engine, 400, lambda n: SimRequest(300, rng.randint(50, 500)), 300.0)
    assert done > 0
    assert engine.batch == H100_LLAMA_8B.max_num_seqs
    assert len(engine.waiting) == 400 - H100_LLAMA_8B.max_num_seqs
    assert engine.stats.wait_s > 0
    assert engine.stats.slot_s == pytest.approx(H100_LLAMA_8B.max_num_seqs * engine.stats.busy_s, rel=1e-3)


def test_the_kv_cache_bounds_the_batch_and_preempts_the_newest() -> None:
    profile = H100_LLAMA_8B
    engine = BatchEngine(profile)
    closed_loop(engine, 256, lambda n: SimRequest(prompt_tokens=3000, output_tokens=1000), 300.0)
    assert engine.batch < profile.max_num_seqs
    assert engine.context <= profile.kv_cache_tokens
    assert engine.batch * 3000 <= profile.kv_cache_tokens
    assert engine.stats.preempted > 0
    assert engine.stats.prefill_tokens > engine.stats.prompt_tokens  # preempted sequences computed again


def test_a_preempted_request_still_gets_all_its_tokens() -> None:
    profile = H100_LLAMA_8B
    engine = BatchEngine(profile)
    per = profile.kv_cache_tokens // 3
    first = engine.submit(SimRequest(prompt_tokens=per, output_tokens=per), 0.0)
    second = engine.submit(SimRequest(prompt_tokens=per, output_tokens=per), 0.0)
    finished = engine.advance(1e9)
    assert [seq.seq_id for seq in finished] == [first.seq_id, second.seq_id]
    assert second.preemptions >= 1 and first.preemptions == 0
    assert engine.stats.output_tokens == 2 * per
    assert engine.stats.prefill_tokens > engine.stats.prompt_tokens  # its prompt and output so far, computed again
    assert engine.context == 0


def test_the_next_turn_hits_the_prefix_cache() -> None:
    engine = BatchEngine(H100_LLAMA_8B)
    turn_1 = engine.submit(SimRequest(prompt_tokens=400, output_tokens=100, prefixes=[(11, 400)], done_key=12), 0.0)
    engine.advance(1e9)
    turn_2 = engine.submit(SimRequest(prompt_tokens=600, output_tokens=100,
                                      prefixes=[(11, 400), (12, 500), (13, 600)], done_key=14), engine.t)
    other = engine.submit(SimRequest(prompt_tokens=600, output_tokens=100, prefixes=[(21, 600)]), engine.t)
    engine.advance(1e9)
    assert turn_1.cached_tokens == 0
    assert turn_2.cached_tokens == 496  # the 500 tokens of turn 1's prompt and answer, in whole 16-token blocks
    assert other.cached_tokens == 0
    assert engine.stats.cached_tokens == 496
    assert engine.stats.prefill_tokens == 400 + 600 - 496 + 600


def test_an_idle_engine_starts_at_the_arrival() -> None:
    engine = BatchEngine(H100_LLAMA_8B)
    seq = engine.submit(SimRequest(prompt_tokens=100, output_tokens=1), 5.0)
    assert engine.advance(4.9) == []
    finished = engine.advance(10.0)
    assert finished == [seq]
    assert seq.finished_at == pytest.approx(5.0 + H100_LLAMA_8B.step_s(1, 100, 100))


def test_an_arrival_joins_at_the_next_step_boundary() -> None:
    profile = H100_LLAMA_8B
    engine = BatchEngine(profile)
    engine.submit(SimRequest(prompt_tokens=100, output_tokens=1000), 0.0)
    engine.advance(0.0)
    late = engine.submit(SimRequest(prompt_tokens=100, output_tokens=1), 1.0)
    engine.advance(2.0)
    assert late.admitted_at >= 1.0
    assert late.admitted_at - 1.0 < profile.step_s(1, 400)  # within one step of its arrival
    # its one token comes from the step that admits it: two sequences, its prompt computed
    took = late.finished_at - late.admitted_at
    assert profile.step_s(2, 200, 100) < took < profile.step_s(2, 1200, 100)


def test_abort_frees_the_slot() -> None:
    engine = BatchEngine(H100_LLAMA_8B)
    seq = engine.submit(SimRequest(prompt_tokens=100, output_tokens=1000), 0.0)
    engine.advance(1.0)
    assert engine.batch == 1
    engine.abort(seq)
    assert engine.batch == 0 and engine.context == 0 and engine.next_finish_at() is None
