"""MathEnvironment: step semantics on hand-written message logs, the verifier off the event loop, typed failures and
the worker processes' lifetime."""

import asyncio
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.errors import EnvironmentStepError
from tests.experience.pool_gate import hold_until


def _log(answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": "What is 6 + 6?"}, {"role": "assistant", "content": answer}]


@pytest.fixture(scope="module")
def env() -> Iterator[MathEnvironment]:
    with MathEnvironment(num_workers=2) as environment:
        yield environment


def test_step_scores_each_sample_in_batch_order(env: MathEnvironment) -> None:
    logs = [_log("6 + 6 = \\boxed{12}"), _log("It is 13."), _log("I do not know."), _log("The answer: 0.5"),
            [*_log("draft 3"), {"role": "user", "content": "again"}, {"role": "assistant", "content": "12"}]]
    infos = [{"ground_truth": "12"}, {"ground_truth": 12}, {"ground_truth": "12"}, {"expected_answer": "1/2"},
             {"ground_truth": "12", "other": "kept by the rollout, not returned"}]
    result = asyncio.run(env.step(logs, infos))
    assert result.rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0]
    assert result.terminateds.tolist() == [True] * 5
    assert result.answers == ["12", "13", None, "0.5", "12"]
    assert [o["content"] for o in result.observations] == [
        "Environment: correct", "Environment: incorrect", "Environment: incorrect", "Environment: correct",
        "Environment: correct"]
    assert {o["role"] for o in result.observations} == {"environment"}
    assert result.metadata == [None] * 5 and result.next_stop_strings == [None] * 5


def test_step_does_not_block_the_event_loop(tmp_path: Path) -> None:
    """By construction: the pool's only worker is held by a job that ends only once a coroutine on the event loop
    lets it go, and the step's check queues behind it. A step that checked on the loop (inline or by blocking on the
    worker) would finish before that coroutine could run; one that awaits the pool finishes after it."""
    gate = tmp_path / "let_go"

    async def scenario(env: MathEnvironment) -> list[str]:
        order: list[str] = []
        # The pool's executor, taken directly: nothing else can hold its only worker on the test's cue.
        held = asyncio.get_running_loop().run_in_executor(env._pool._pool, hold_until, str(gate), 60.0)

        async def let_go() -> None:
            await asyncio.sleep(0)  # runs only if the step yielded the loop while its check waits
            order.append("let go")
            gate.touch()

        async def step() -> None:
            result = await env.step([_log("\\boxed{\\frac{24}{2}}")], [{"ground_truth": "12"}])
            assert result.rewards.tolist() == [1.0]
            order.append("step done")

        await asyncio.gather(step(), let_go())
        assert await held, "the worker was never let go"
        return order

    with MathEnvironment(num_workers=1) as env:
        assert asyncio.run(scenario(env)) == ["let go", "step done"]


@pytest.mark.parametrize(
    "logs, infos, message",
    [([_log("12"), _log("12")], [{"ground_truth": "12"}, {"answer": "12"}], "sample 1: extra_env_info has no"),
     ([_log("12")], [None], "sample 0: extra_env_info has no"),
     ([[{"role": "user", "content": "hi"}]], [{"ground_truth": "1"}], "sample 0: .*no assistant message"),
     ([_log("12")], [{"ground_truth": "12"}, {"ground_truth": "12"}], "1 message logs but 2 metadata")],
)
def test_bad_samples_raise_naming_the_sample(env: MathEnvironment, logs: list, infos: list, message: str) -> None:
    with pytest.raises(EnvironmentStepError, match=message):
        asyncio.run(env.step(logs, infos))


def test_a_check_past_the_timeout_is_an_error_not_a_zero() -> None:
    with MathEnvironment(num_workers=1, verify_timeout_s=0.001) as env:
        with pytest.raises(EnvironmentStepError, match="sample 0: checking answer '12'.*VerifyTimeoutError"):
            asyncio.run(env.step([_log("12")], [{"ground_truth": "12"}]))


def _new_children(before: set[int]) -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]


def test_a_dead_worker_fails_its_check_and_the_next_step_gets_a_fresh_pool() -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with MathEnvironment(num_workers=1) as env:
        assert asyncio.run(env.step([_log("3")], [{"ground_truth": "3"}])).rewards.tolist() == [1.0]
        for worker in _new_children(before):
            worker.kill()
        psutil.wait_procs(_new_children(before), timeout=10)
        with pytest.raises(EnvironmentStepError, match="sample 0: .*a verifier worker died"):
            asyncio.run(env.step([_log("3")], [{"ground_truth": "3"}]))
        assert asyncio.run(env.step([_log("4")], [{"ground_truth": "3"}])).rewards.tolist() == [0.0]


def test_shutdown_stops_the_workers() -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with MathEnvironment(num_workers=2) as env:
        asyncio.run(env.step([_log("1"), _log("2")], [{"ground_truth": "1"}, {"ground_truth": "2"}]))
        workers = _new_children(before)
        assert workers, "the pool started no worker process"
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    with pytest.raises(EnvironmentStepError, match="sample 0: .*RuntimeError"):
        asyncio.run(env.step([_log("1")], [{"ground_truth": "1"}]))
