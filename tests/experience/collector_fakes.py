"""Fault-injecting stand-ins for the collector tests: a scripted rollout manager, configs, a simulated trainer.

Stubs are used here only to inject faults (stragglers, failing groups, a dead engine) deterministically; the
collector, buffer, prompt source and loader under test are the real ones.
"""

import asyncio
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Optional

import pytest

from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.errors import DataExhaustedError, GenerationError, PromptGroupError
from nemo_gym.experience.interfaces import DatumSpec, PromptGroupRecord


def make_dataset(size: int) -> list[DatumSpec]:
    return [DatumSpec(message_log=[], extra_env_info={"answer": i}, task_name="fake", idx=i) for i in range(size)]


def master_config(prompts_per_step: int = 4, max_age: int = 2, **async_grpo: Any) -> dict[str, Any]:
    return {
        "grpo": {"num_prompts_per_step": prompts_per_step, "num_generations_per_prompt": 2,
                 "async_grpo": {"max_trajectory_age_steps": max_age, **async_grpo}},
        "policy": {"max_total_sequence_length": 512, "generation": {"max_new_tokens": 16}},
    }


class ScriptedRolloutManager:
    """`run_rollout` sleeps `delay_s` and returns a record, unless the prompt's script says fail or hang.

    The default delay is 0: `asyncio.sleep(0)` yields to the loop once, which no group timeout can interrupt (the
    rollout resumes before any timer that fell due meanwhile), so however loaded the machine, only a scripted hang
    times out. A positive delay is a sleep that a loaded machine may stretch past a timeout.

    Scripts are keyed by the prompt's `idx` and count its attempts over the manager's life: `fail_first` /
    `hang_first` misbehave on the first attempt only, `fail_always` / `hang_always` on every one. `kill()` makes
    every later call raise (a dead engine); `slow` maps idx -> its own delay. `gates` maps idx -> a condition on
    state: each attempt of that prompt waits (polling on the loop) until it holds before following its script, which
    orders events by state instead of by latencies.
    """

    def __init__(self, delay_s: float = 0.0, *, fail_always: Iterable[int] = (), fail_first: Iterable[int] = (),
                 hang_first: Iterable[int] = (), hang_always: Iterable[int] = (),
                 slow: Optional[dict[int, float]] = None,
                 gates: Optional[dict[int, Callable[[], bool]]] = None) -> None:
        self.delay_s = delay_s
        self.fail_always, self.fail_first = set(fail_always), set(fail_first)
        self.hang_first, self.hang_always = set(hang_first), set(hang_always)
        self.slow = slow or {}
        self.gates = gates or {}
        self.attempts: Counter[int] = Counter()
        self.returned: Counter[int] = Counter()  # records handed back, per idx
        self.running = 0  # calls started and not yet returned or raised
        self.dead = False
        self.hang_everything = False

    def kill(self) -> None:
        self.dead = True

    async def run_rollout(self, input_sample: DatumSpec) -> PromptGroupRecord:
        self.running += 1
        try:
            return await self._run(input_sample)
        finally:
            self.running -= 1

    async def _run(self, input_sample: DatumSpec) -> PromptGroupRecord:
        idx = input_sample["idx"]
        attempt = self.attempts[idx]
        self.attempts[idx] += 1
        if self.dead:
            raise GenerationError("scripted: the inference engine is down")
        gate = self.gates.get(idx)
        while gate is not None and not gate():
            await asyncio.sleep(0.001)
        if self.hang_everything or idx in self.hang_always or (idx in self.hang_first and attempt == 0):
            await asyncio.Event().wait()
        await asyncio.sleep(self.slow.get(idx, self.delay_s))
        if idx in self.fail_always or (idx in self.fail_first and attempt == 0):
            raise PromptGroupError(idx, 0, RuntimeError("scripted failure"))
        self.returned[idx] += 1
        return PromptGroupRecord(prompt_idx=idx, prompt=input_sample["message_log"],
                                 extra_env_info=input_sample["extra_env_info"], metadata={"task_name": "fake"},
                                 completions=[])


# The simulated-trainer scenario: 30 prompts x 3 epochs, 4 prompts a step, max age 2; prompts 7 and 19 always
# fail, 5 and 22 fail once, 3, 11 and 25 straggle (hang) once. The healthy groups take no time, so the timeout count
# is exact on any machine (see ScriptedRolloutManager).
DATASET, EPOCHS, PROMPTS_PER_STEP, MAX_AGE = 30, 3, 4, 2
ALWAYS_FAIL = frozenset({7, 19})
SCENARIO_KNOBS = dict(max_epochs=EPOCHS, group_timeout_s=0.3, max_group_attempts=2)


def scenario_manager() -> ScriptedRolloutManager:
    return ScriptedRolloutManager(fail_always=ALWAYS_FAIL, fail_first={5, 22}, hang_first={3, 11, 25})


@contextmanager
def running_collector(manager: Any, dataset_size: int = 40, *, prompts_per_step: int = 4, max_age: int = 2,
                      batch_size: int = 8, start_step: int = 0, checkpoint: Any = None, buffer_size: int = 0,
                      seed: int = 0, shuffle: bool = True, order: Optional[list[int]] = None,
                      **async_grpo: Any) -> Iterator[tuple[AsyncTrajectoryCollector, ReplayBuffer]]:
    """A started collector over a StatefulPromptLoader (shuffled, or over the prompts in `order`); always shut down,
    however the test ends."""
    buffer = ReplayBuffer(buffer_size or prompts_per_step * (max_age + 1) * 2)
    collector = AsyncTrajectoryCollector(None, None, {}, master_config(prompts_per_step, max_age, **async_grpo),
                                         buffer, start_step, rollout_manager=manager)
    try:
        if checkpoint is not None:
            collector.load_checkpoint(checkpoint)
        dataset = make_dataset(dataset_size)
        if order is not None:
            dataset, shuffle = [dataset[i] for i in order], False
        collector.start_collection(StatefulPromptLoader(dataset, batch_size, seed=seed, shuffle=shuffle))
        yield collector, buffer
    finally:
        collector.shutdown()


def train_step(collector: AsyncTrajectoryCollector, buffer: ReplayBuffer, step: int, prompts_per_step: int,
               max_age: int, *, train_time_s: float = 0.0, timeout_s: float = 10.0) -> list[tuple[int, int]]:
    """One simulated trainer step: take the step's groups, check them, "train", refit to version step+1.
    Returns the (epoch, idx) of the prompts trained."""
    batch = buffer.sample_blocking(prompts_per_step, step, max_age, timeout_s=timeout_s)
    entries = batch["entries"]
    assert len(entries) == prompts_per_step
    assert all(e.target_weight_version == step for e in entries)
    assert all(0 <= step - e.generation_weight_version <= max_age for e in entries)
    time.sleep(train_time_s)
    collector.prepare_for_refit(timeout_s=timeout_s)
    collector.set_weight_version(step + 1)
    collector.resume_after_refit()
    return [e.prompt.key for e in entries]


def train_until_exhausted(collector: AsyncTrajectoryCollector, buffer: ReplayBuffer, first_step: int,
                          prompts_per_step: int, max_age: int, *, train_time_s: float = 0.0,
                          timeout_s: float = 10.0) -> tuple[list[tuple[int, int]], int]:
    """Train step after step until the data runs out; returns the prompts trained and the step that could not
    be filled."""
    trained, step = [], first_step
    while True:
        try:
            trained += train_step(collector, buffer, step, prompts_per_step, max_age, train_time_s=train_time_s,
                                  timeout_s=timeout_s)
        except DataExhaustedError:
            return trained, step
        step += 1


def wait_for(predicate: Any, timeout_s: float) -> bool:
    """Whether `predicate()` became true within `timeout_s` (polled; the timeout only bounds a failing test)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def collector_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "AsyncTrajectoryCollector"]


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    """Fails a test that leaves a collector thread running."""
    yield
    assert collector_threads() == []
