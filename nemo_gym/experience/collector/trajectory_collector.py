"""Asynchronous trajectory collection: generation runs ahead of training on older weights (NeMo RL's names).

A background thread runs an asyncio loop that keeps up to `max_concurrent_groups` prompt groups generating
(`RolloutManager.run_rollout`, one prompt each) and pushes every finished group to the replay buffer at once,
tagged (generation weight version, target weight version). The trainer-facing methods are synchronous and
thread-safe.

Planning is by count, not by a "highest target generated" mark: a target still needs
`num_prompts_per_step - buffered - in flight` groups, and the collector always fills the lowest target that
needs some, the trainer's current one included. That single rule is what makes the reference's wedges
impossible: a failed or timed-out group drops out of "in flight" and its slot is refilled (by a retry of the
same prompt, or after `max_group_attempts` by the next prompt, the failure being reported); a restore recomputes
every target's need, so step N+1 is never skipped; nothing depends on which add came first.

Waits are state-based. The loop thread sleeps on a wake event that is replaced, never cleared, and captured
before the state is examined: any change made after the examination (a new weight version during a refit, a
resume, a sample that frees space) sets the captured event, so no wake-up is lost. Trainer-side waits use a
`threading.Condition` on the same state. Every way collection stops reaches a waiting trainer as a typed error
raised by the buffer (`CollectorDiedError`, `DataExhaustedError`, `CollectorShutdownError`).
"""

import asyncio
import copy
import itertools
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, cast

from nemo_gym.experience.collector.checkpoint import read_checkpoint, write_checkpoint
from nemo_gym.experience.collector.config import parse_master_config
from nemo_gym.experience.collector.metrics import CollectorMetrics, FailedPromptGroup
from nemo_gym.experience.collector.prompt_source import PendingPrompt, PromptSource, StatefulLoader
from nemo_gym.experience.collector.replay_buffer import BufferedGroup, ReplayBuffer
from nemo_gym.experience.collector.rollout_runner import GroupRetrier, RolloutRunner
from nemo_gym.experience.errors import (
    CollectionStoppedError,
    CollectionTimeoutError,
    CollectorCheckpointError,
    CollectorDiedError,
    CollectorShutdownError,
    DataExhaustedError,
    ExperienceError,
    GenerationError,
    GroupTimeoutError,
)
from nemo_gym.experience.generation.interfaces import GenerationConfig, implements
from nemo_gym.experience.interfaces import PromptGroupRecord
from nemo_gym.open_files import allow_open_files_up_to_hard_limit


@dataclass
class _Slot:
    """One prompt group the collector has started: counted toward its target until pushed or failed."""

    seq: int
    prompt: PendingPrompt
    target_weight_version: int
    generation_weight_version: int
    generating: bool = True  # False once the rollout returned and only the push to the buffer is left


class AsyncTrajectoryCollector:
    """Collects trajectories asynchronously and adds them to the replay buffer."""

    def __init__(self, policy_generation: Any, tokenizer: Any, task_to_env: dict[str, Any],
                 master_config: Mapping[str, Any], replay_buffer: ReplayBuffer, start_step: int = 0, *,
                 rollout_manager: Optional[RolloutRunner] = None) -> None:
        self.config = parse_master_config(master_config)
        self._grpo = self.config.grpo
        self._async = self.config.grpo.async_grpo
        if replay_buffer.max_size < self._grpo.min_buffer_size:
            raise ValueError(
                f"replay buffer max_size {replay_buffer.max_size} < num_prompts_per_step x "
                f"(max_trajectory_age_steps + 1) = {self._grpo.min_buffer_size}: it could fill with later steps' "
                f"groups while the trainer waits for the current one")
        if self._async.recompute_kv_cache_after_weight_updates and not implements(policy_generation,
                                                                                  "invalidate_kv_cache"):
            raise ValueError("recompute_kv_cache_after_weight_updates needs a policy_generation with "
                             f"invalidate_kv_cache(); {type(policy_generation).__name__} has none")
        self.policy_generation = policy_generation
        self.tokenizer = tokenizer
        self.task_to_env = task_to_env
        self.master_config = master_config
        self.replay_buffer = replay_buffer
        if rollout_manager is None:
            # Imported here so this module (and its tests' fakes) load without the rollout stack.
            from nemo_gym.experience.rollout_manager import RolloutManager

            rollout_manager = RolloutManager(
                tokenizer=tokenizer, task_to_env=task_to_env,
                num_generations_per_prompt=self._grpo.num_generations_per_prompt,
                max_seq_len=self.config.policy.max_total_sequence_length,
                max_rollout_turns=self._grpo.max_rollout_turns, policy_generation=policy_generation,
                generation_config=cast(GenerationConfig, dict(self.config.policy.generation or {})),
                use_nemo_gym=self.config.env.should_use_nemo_gym)
        elif not isinstance(rollout_manager, RolloutRunner):
            raise TypeError(f"rollout_manager needs an async run_rollout(datum): "
                            f"{type(rollout_manager).__name__} has none")
        # The group attempt is the one retry budget of this path (docs/architecture.md, "Retry budget").
        if isinstance(rollout_manager, GroupRetrier):
            rollout_manager.retry_by_group(self._async.group_timeout_s)
        self.rollout_manager = rollout_manager

        # One re-entrant lock guards all collector state; lock order is collector -> buffer, never the reverse.
        self._cond = threading.Condition(threading.RLock())
        self.initial_weight_version = start_step
        self._weight_version = start_step
        self._manual_paused = False
        self._refit_paused = False
        self._slots: dict[int, _Slot] = {}
        self._slot_seq = itertools.count()
        self._consecutive_failures = 0
        self._stop_reason: Optional[CollectionStoppedError] = None  # died or shut down
        self._exhausted_reported = False
        self._metrics = CollectorMetrics()
        self._failed: list[FailedPromptGroup] = []
        self._source: Optional[PromptSource] = None
        self._restored: Optional[tuple[dict[str, Any], list[PendingPrompt]]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread_id: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._changed = asyncio.Event()  # binds to the loop thread's loop on its first wait there
        self._tasks: set[asyncio.Task[None]] = set()
        replay_buffer.add_listener(self._wake)

    # ---- planning ------------------------------------------------------------------------------------------

    def _calculate_target_weights(self, generation_weight_version: int) -> list[int]:
        """Target weight versions a generator on `generation_weight_version` runs ahead for.

        Example: generation_weight_version = 10, max_trajectory_age_steps = 4 -> [11, 12, 13, 14]. On the initial
        version it is [v0 … v0+A] so that step v0 has data too.
        """
        age = self._async.max_trajectory_age_steps
        if generation_weight_version == self.initial_weight_version:
            return list(range(generation_weight_version, generation_weight_version + age + 1))
        return [generation_weight_version + i for i in range(1, age + 1)]

    def _get_next_target_for_generation(self, generation_weight_version: int) -> Optional[int]:
        """The lowest target that still needs groups, or None.

        Besides `_calculate_target_weights`, the current version's own target is a candidate while the trainer
        has not taken it: that is gap filling for a group that failed after its target's window passed (the
        reference never refills it and the trainer waits forever). A target the trainer already sampled is
        never generated for again.
        """
        with self._cond:
            buffered = self.replay_buffer.count_by_target()
            sampled = self.replay_buffer.highest_sampled_target
            in_flight: dict[int, int] = {}
            for slot in self._slots.values():
                in_flight[slot.target_weight_version] = in_flight.get(slot.target_weight_version, 0) + 1
            candidates = sorted({generation_weight_version, *self._calculate_target_weights(generation_weight_version)})
            for target in candidates:
                needed = self._grpo.num_prompts_per_step - buffered.get(target, 0) - in_flight.get(target, 0)
                if target > sampled and needed > 0:
                    return target
            return None

    # ---- trainer API ---------------------------------------------------------------------------------------

    def start_collection(self, dataloader: StatefulLoader) -> None:
        """Start collecting from `dataloader` (any iterable of batches with state_dict / load_state_dict).

        After `load_checkpoint`, the dataloader's saved cursor is applied here: do not load it yourself.
        """
        with self._cond:
            if self._thread is not None:
                raise RuntimeError("start_collection was already called on this collector")
            source = PromptSource(dataloader, self._grpo.epochs)
            if self._restored is not None:
                source_state, requeue = self._restored
                source.load_state_dict(source_state)
                source.requeue(requeue)
                self._restored = None
            self._source = source
            allow_open_files_up_to_hard_limit()  # a socket per generation in flight
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._collection_loop, name="AsyncTrajectoryCollector",
                                            daemon=True)
            self._thread.start()

    def set_weight_version(self, version: int) -> None:
        """The trainer's weights are now `version`; wakes a collector idle at its generation limit."""
        with self._cond:
            self._weight_version = version
            self._cond.notify_all()
        self._wake()

    def get_weight_version(self) -> int:
        with self._cond:
            return self._weight_version

    def pause(self) -> None:
        """Stop starting new groups (running ones finish and are buffered)."""
        self._set_flag("_manual_paused", True)

    def resume(self) -> None:
        self._set_flag("_manual_paused", False)

    def prepare_for_refit(self, timeout_s: Optional[float] = None) -> None:
        """Stop new generation starts; unless in-flight weight updates are on, wait for running generations.

        With in-flight updates the running groups keep going (tagged with the version they started on) while
        the weights change under them.
        """
        self._set_flag("_refit_paused", True)
        if not self._async.in_flight_weight_updates:
            self.wait_for_pending_generations(timeout_s)

    def resume_after_refit(self) -> None:
        """Let new generations start again (call after `set_weight_version`).

        With in-flight updates and `recompute_kv_cache_after_weight_updates`, first drops the backend's cached keys
        and values (computed with the old weights), so running generations recompute theirs; if the backend says
        it could not, GenerationError is raised and the collector stays paused for the refit.
        """
        if self._async.in_flight_weight_updates and self._async.recompute_kv_cache_after_weight_updates:
            if not self.policy_generation.invalidate_kv_cache():
                raise GenerationError(
                    f"{type(self.policy_generation).__name__}.invalidate_kv_cache() reported failure: running "
                    f"generations would go on with keys and values of the old weights; new generations stay paused")
        self._set_flag("_refit_paused", False)

    def wait_for_pending_generations(self, timeout_s: Optional[float] = None) -> None:
        """Wait until no rollout is running (or collection stopped); `CollectionTimeoutError` after `timeout_s`."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._stop_reason is not None or not any(s.generating for s in self._slots.values()),
                timeout_s)
            if not done:
                running = sum(s.generating for s in self._slots.values())
                raise CollectionTimeoutError(f"{running} prompt group(s) still generating after {timeout_s}s")

    def get_dataloader_state(self) -> dict[str, Any]:
        """The dataloader's own cursor (the reference's method).

        Alone it is ahead of the buffer by every prompt drawn but not yet trained; `save_checkpoint` stores it
        together with those prompts, which is what a resume needs.
        """
        with self._cond:
            return self._source.state_dict()["dataloader"] if self._source is not None else {}

    def check_health(self) -> None:
        """Raise the reason collection stopped (died or shut down), if it did."""
        with self._cond:
            if self._stop_reason is not None:
                raise self._stop_reason

    def get_failed_groups(self) -> list[FailedPromptGroup]:
        """Prompts given up on after `max_group_attempts`; each one's slot was refilled with another prompt."""
        with self._cond:
            return list(self._failed)

    def get_metrics(self) -> dict[str, Any]:
        """Counters for the trainer's logger: the collector's, the buffer's, and the current state."""
        with self._cond:
            return {
                **self._metrics.as_dict(), **self.replay_buffer.get_metrics(),
                "weight_version": self._weight_version,
                "epoch": self._source.epoch if self._source is not None else 0,
                "groups_in_flight": len(self._slots),
                "consecutive_failures": self._consecutive_failures,
            }

    def shutdown(self) -> None:
        """Stop the loop thread, cancelling running groups; a trainer still waiting gets CollectorShutdownError."""
        self._stop(CollectorShutdownError("the collector was shut down"))
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._async.shutdown_grace_s + 5.0)
            if thread.is_alive():
                raise CollectorShutdownError(
                    f"collector thread still running {self._async.shutdown_grace_s + 5.0}s after shutdown")

    # ---- checkpoint ----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A consistent snapshot: buffer, dataloader cursor, and every drawn prompt not yet trained.

        Taken under the collector's lock, which also guards every draw from the dataloader and every push, so the
        cursor, the buffer and the in-flight prompts all describe the same moment.
        """
        with self._cond:
            if self._source is None:
                raise CollectorCheckpointError("state_dict needs a started collector (call start_collection first)")
            return {
                "weight_version": self._weight_version,
                "buffer": self.replay_buffer.state_dict(),
                "source": self._source.state_dict(),
                "in_flight": [replace(s.prompt) for s in sorted(self._slots.values(), key=lambda s: s.seq)],
                "failed": list(self._failed),
                "metrics": replace(self._metrics),
            }

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write `state_dict()` atomically to `path` (see checkpoint.py)."""
        write_checkpoint(path, self.state_dict())

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        self.load_state_dict(read_checkpoint(path))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore into this (not yet started) collector, resuming at `start_step` = N.

        Buffered groups that step N … can still use are kept; the others (aimed at a step before N, or
        generated outside N's age window) are dropped and their prompts re-queued with the in-flight ones, so
        every drawn prompt is generated again exactly when it was not kept. Steps N and N+1 both get data
        because each target's need is recomputed from the kept groups.
        """
        with self._cond:
            if self._thread is not None:
                raise CollectorCheckpointError("load a checkpoint before start_collection, not after")
            resume = self._weight_version
            age = self._async.max_trajectory_age_steps
            keep: list[BufferedGroup] = []
            dropped: list[BufferedGroup] = list(state["buffer"]["evicted"])
            for entry in state["buffer"]["entries"]:
                target, generated = entry.target_weight_version, entry.generation_weight_version
                usable = target >= resume and target - age <= generated <= resume
                (keep if usable else dropped).append(entry)
            requeue = list(state["in_flight"]) + [e.prompt for e in dropped if e.prompt is not None]
            self.replay_buffer.load_state_dict({
                "entries": keep, "evicted": [], "highest_sampled_target": resume - 1,
                "counters": state["buffer"]["counters"]})
            self._restored = (state["source"], requeue)
            self._failed = list(state["failed"])
            self._metrics = replace(state["metrics"])

    # ---- the loop thread -----------------------------------------------------------------------------------

    def _collection_loop(self) -> None:
        """Run the collection loop in the background thread until collection stops."""
        assert self._loop is not None
        self._loop_thread_id = threading.get_ident()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._schedule())
        except BaseException as exc:  # the thread must never end without telling the trainer why
            self._stop(CollectorDiedError(f"collection loop crashed: {type(exc).__name__}: {exc}"), exc)
        finally:
            self._loop.close()

    async def _schedule(self) -> None:
        try:
            while True:
                changed = self._changed  # captured before looking at the state: see the module docstring
                with self._cond:
                    if self._stop_reason is not None:
                        break
                    self._absorb_evicted()
                    self._start_ready_groups()
                    self._report_exhaustion()
                await changed.wait()
        except Exception as exc:
            self._stop(CollectorDiedError(f"collection loop failed: {type(exc).__name__}: {exc}"), exc)
        finally:
            await self._cancel_groups()

    def _absorb_evicted(self) -> None:
        assert self._source is not None
        prompts = [e.prompt for e in self.replay_buffer.drain_evicted() if e.prompt is not None]
        if prompts:
            self._source.requeue(prompts)
            self._metrics.prompts_requeued += len(prompts)

    def _start_ready_groups(self) -> None:
        assert self._source is not None and self._loop is not None
        while not (self._manual_paused or self._refit_paused) and len(self._slots) < self._grpo.concurrent_groups:
            target = self._get_next_target_for_generation(self._weight_version)
            if target is None:
                return
            prompt = self._source.next_prompt()
            if prompt is None:
                return
            slot = _Slot(next(self._slot_seq), prompt, target, self._weight_version)
            self._slots[slot.seq] = slot
            task = self._loop.create_task(self._run_prompt_group_worker(slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _report_exhaustion(self) -> None:
        """Tell the buffer once no group can come any more (or that one can again, after a re-queue).

        Before saying so, groups of later steps are moved into earlier steps left short by failed groups, so
        only the run's last step can be partial.
        """
        assert self._source is not None
        finished = self._source.exhausted and not self._source.has_queued() and not self._slots
        if finished and not self._exhausted_reported:
            self.replay_buffer.fill_holes(self._grpo.num_prompts_per_step, self._async.max_trajectory_age_steps,
                                          current_weight_version=self._weight_version)
            self.replay_buffer.set_producer_stop(DataExhaustedError(
                f"no more prompts: {self._source.exhausted_reason}; {len(self._failed)} prompt group(s) failed"))
        elif not finished and self._exhausted_reported:
            self.replay_buffer.set_producer_stop(None)
        self._exhausted_reported = finished

    async def _run_prompt_group_worker(self, slot: _Slot) -> None:
        """Generate one prompt group and push it, or record the failed attempt."""
        started = time.monotonic()
        timeout_s = self._async.group_timeout_s
        try:
            async with asyncio.timeout(timeout_s) as deadline:
                # A copy: a rollout manager that extends the message log in place must not change what a retry,
                # a re-queue or a checkpoint sees as the prompt.
                record = await self.rollout_manager.run_rollout(copy.deepcopy(slot.prompt.datum))
        except TimeoutError as exc:
            if deadline.expired() and timeout_s is not None:
                self._on_attempt_failed(slot, GroupTimeoutError(slot.prompt.key, timeout_s), timed_out=True)
            else:
                self._on_attempt_failed(slot, exc)
        except (ExperienceError, OSError) as exc:
            self._on_attempt_failed(slot, exc)
        except Exception as exc:
            # Outside the rollout manager's contract (it raises ExperienceError): a bug retrying would hide.
            self._stop(CollectorDiedError(
                f"rollout manager raised {type(exc).__name__} for prompt (epoch {slot.prompt.epoch}, idx "
                f"{slot.prompt.idx}): {exc}"), exc)
        else:
            await self._push(slot, record, time.monotonic() - started)

    async def _push(self, slot: _Slot, record: PromptGroupRecord, seconds: float) -> None:
        with self._cond:
            slot.generating = False
            self._cond.notify_all()
        while True:
            changed = self._changed
            with self._cond:
                if self._stop_reason is not None:
                    return
                # Push and leave "in flight" in one locked step: a snapshot sees the group in exactly one place.
                status = self.replay_buffer.push_with_wait_signal(
                    record, slot.generation_weight_version, slot.target_weight_version, prompt=slot.prompt,
                    generation_time_s=seconds)
                if status == "success":
                    del self._slots[slot.seq]
                    self._consecutive_failures = 0
                    self._metrics.record_generated(seconds)
                    self._cond.notify_all()
                    self._bump()
                    return
            await changed.wait()  # the buffer's listener wakes us when a sample frees space

    def _on_attempt_failed(self, slot: _Slot, exc: BaseException, timed_out: bool = False) -> None:
        with self._cond:
            del self._slots[slot.seq]
            prompt = slot.prompt
            prompt.attempts += 1
            self._consecutive_failures += 1
            self._metrics.group_attempts_failed += 1
            self._metrics.group_timeouts += int(timed_out)
            assert self._source is not None
            if prompt.attempts >= self._async.max_group_attempts:
                self._failed.append(FailedPromptGroup(prompt.epoch, prompt.idx, slot.target_weight_version,
                                                      prompt.attempts, f"{type(exc).__name__}: {exc}"))
                self._metrics.groups_failed += 1
            else:
                self._source.requeue([prompt])
            if self._consecutive_failures >= self._grpo.consecutive_failures_limit:
                self._stop(CollectorDiedError(
                    f"{self._consecutive_failures} prompt group attempts failed in a row (generation engine "
                    f"down?); last: {type(exc).__name__}: {exc}"), exc)
            self._cond.notify_all()
            self._bump()

    def _stop(self, reason: CollectionStoppedError, cause: Optional[BaseException] = None) -> None:
        """Stop for good; the first reason wins and is what every waiting trainer gets."""
        with self._cond:
            if self._stop_reason is None:
                if cause is not None:
                    reason.__cause__ = cause
                self._stop_reason = reason
                self.replay_buffer.set_producer_stop(reason)
            self._cond.notify_all()
        self._wake()

    async def _cancel_groups(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self._async.shutdown_grace_s)

    # ---- wake-ups ------------------------------------------------------------------------------------------

    def _set_flag(self, name: str, value: bool) -> None:
        with self._cond:
            setattr(self, name, value)
            self._cond.notify_all()
        self._wake()

    def _bump(self) -> None:
        """Loop thread only: set the current wake event and replace it (never clear it)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _wake(self) -> None:
        """From any thread: make the loop look at the state again."""
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread_id:
            self._bump()
            return
        try:
            loop.call_soon_threadsafe(self._bump)
        except RuntimeError:
            pass  # the loop is closed: collection has ended and nothing is waiting
