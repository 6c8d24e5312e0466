"""Multi-turn rollouts of a policy against environments at the token level (NeMo RL's experience.rollouts).

Every turn appends two messages to a sample's log: the assistant message with the exact generated `token_ids` and
their `generation_logprobs`, then the environment's observation with the tokens the chat template gives it after
that turn (nemo_gym.experience.turns.chat_template). Flattening a log therefore always gives the exact sequence the
policy saw and produced, and never more than `max_seq_len` tokens.

Two ways to run a batch: `run_multi_turn_rollout` steps every active sample together, one batched generation per
turn; `run_async_multi_turn_rollout` runs each sample's own turn loop concurrently (one request per turn), so a
sample that needs fewer turns never waits for the slowest one. A failure of a generation or an environment raises
a typed error naming the sample, turn and stage; no partial sample is ever returned as if it had finished.

An episode ends when its environment says terminated, when nothing more fits under `max_seq_len`, or after
`max_rollout_turns`. A turn cut by max_new_tokens marks the sample `truncated` but does not end it (NeMo RL's
run_multi_turn_rollout does the same; its per-sample loop ends there, NVIDIA-NeMo/RL issue 3851):
`end_on_truncated_turn=True` ends it. `limits` (turns/generation_limits.py) adds a generation config's cap and stop
strings to every request. Environments may be NeMo RL's Ray actors and backends may follow NeMo RL's
GenerationInterface without our extras (environments/calling.py, backend_compat.py).
"""

import asyncio
import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.environments.calling import check_environment, step_environment
from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_gym.experience.errors import (
    EnvironmentStepError,
    SampleRolloutError,
    UnknownTaskError,
    UnsupportedBackendError,
)
from nemo_gym.experience.generation.interfaces import GenerationInterface, GenerationOutputSpec
from nemo_gym.experience.generation.samples import merge_stop_strings
from nemo_gym.experience.interfaces import DatumSpec, LLMMessage, LLMMessageLogType
from nemo_gym.experience.turns.backend_compat import conform_outputs, pad_token_id_of, require_async_backend
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.generation_limits import NO_LIMITS, GenerationLimits
from nemo_gym.experience.turns.message_log import batched_message_log_to_flat_message, chat_view, message_log_length
from nemo_gym.experience.turns.rollout_metrics import batch_rollout_metrics
from nemo_gym.sync_bridge import run_sync

UNLIMITED_TURNS = 999999


# ---- generation ----------------------------------------------------------------------------------------------


def _stop_strings(batch: BatchedDataDict[DatumSpec]) -> list[Optional[list[str]]]:
    return list(batch.get("stop_strings") or [None] * batch.size)


def _append_generations(
    outputs: BatchedDataDict[GenerationOutputSpec],
    batch: BatchedDataDict[DatumSpec],
    tokenizer: Any,
    input_lengths: torch.Tensor,
    include_logprobs: bool,
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Append each sample's generated part of `outputs` to its message log as an assistant message."""
    generated_ids = []
    for i, message_log in enumerate(batch["message_log"]):
        start, end = int(input_lengths[i]), int(outputs["unpadded_sequence_lengths"][i])
        ids = outputs["output_ids"][i, start:end].clone()
        message: LLMMessage = {
            "role": "assistant",
            "content": tokenizer.decode(ids.tolist(), skip_special_tokens=True),
            "token_ids": ids,
        }
        if include_logprobs:
            message["generation_logprobs"] = outputs["logprobs"][i, start:end].clone()
        if "weight_versions" in outputs:
            message["generation_weight_versions"] = tuple(outputs["weight_versions"][i])
        message_log.append(message)
        generated_ids.append(ids)
    lengths = outputs["generation_lengths"]
    metrics = {
        "mean_generation_length": float(lengths.float().mean()) if len(lengths) else 0.0,
        "total_generated_tokens": int(lengths.sum()),
    }
    return generated_ids, metrics


def generate_responses(
    policy_generation: GenerationInterface,
    generation_input_data: BatchedDataDict[Any],
    batch: BatchedDataDict[DatumSpec],
    tokenizer: Any,
    input_lengths: torch.Tensor,
    include_logprobs: bool = True,
    greedy: bool = False,
) -> tuple[BatchedDataDict[DatumSpec], list[torch.Tensor], dict[str, Any]]:
    """Generate one turn for every sample of `batch` (with its stop strings) and append it to the sample's message
    log."""
    generation_input_data["stop_strings"] = _stop_strings(batch)
    batch, generated_ids, metrics, _ = _generate_turn(
        policy_generation, generation_input_data, batch, tokenizer, input_lengths, include_logprobs, greedy)
    return batch, generated_ids, metrics


def _generate_turn(policy_generation: GenerationInterface, generation_input_data: BatchedDataDict[Any],
                   batch: BatchedDataDict[DatumSpec], tokenizer: Any, input_lengths: torch.Tensor,
                   include_logprobs: bool, greedy: bool
                   ) -> tuple[BatchedDataDict[DatumSpec], list[torch.Tensor], dict[str, Any], torch.Tensor]:
    outputs = policy_generation.generate(generation_input_data, greedy=greedy)
    outputs = conform_outputs(outputs, generation_input_data, policy_generation, tokenizer)
    generated_ids, metrics = _append_generations(outputs, batch, tokenizer, input_lengths, include_logprobs)
    return batch, generated_ids, metrics, outputs["truncated"]


async def _collect_async_outputs(policy_generation: GenerationInterface, generation_input_data: BatchedDataDict[Any],
                                 greedy: bool, tokenizer: Any) -> BatchedDataDict[GenerationOutputSpec]:
    by_index: dict[int, BatchedDataDict[Any]] = {}
    async for index, output in policy_generation.generate_async(generation_input_data, greedy=greedy):
        by_index[index] = output
    missing = set(range(generation_input_data.size)) - set(by_index)
    if missing:
        raise UnsupportedBackendError(
            f"{type(policy_generation).__name__}.generate_async returned no output for samples {sorted(missing)}")
    pad = pad_token_id_of(policy_generation, tokenizer)
    return BatchedDataDict.from_batches([by_index[i] for i in sorted(by_index)],
                                        pad_value_dict={"output_ids": pad, "logprobs": 0.0})


async def generate_responses_async(
    policy_generation: GenerationInterface,
    generation_input_data: BatchedDataDict[Any],
    batch: BatchedDataDict[DatumSpec],
    tokenizer: Any,
    input_lengths: torch.Tensor,
    include_logprobs: bool = True,
    greedy: bool = False,
) -> tuple[BatchedDataDict[DatumSpec], list[torch.Tensor], dict[str, Any]]:
    """`generate_responses` through the backend's streaming path: outputs are gathered as samples finish, put
    back in batch order, then appended the same way."""
    generation_input_data["stop_strings"] = _stop_strings(batch)
    batch, generated_ids, metrics, _ = await _generate_turn_async(
        policy_generation, generation_input_data, batch, tokenizer, input_lengths, include_logprobs, greedy)
    return batch, generated_ids, metrics


async def _generate_turn_async(policy_generation: GenerationInterface, generation_input_data: BatchedDataDict[Any],
                               batch: BatchedDataDict[DatumSpec], tokenizer: Any, input_lengths: torch.Tensor,
                               include_logprobs: bool, greedy: bool
                               ) -> tuple[BatchedDataDict[DatumSpec], list[torch.Tensor], dict[str, Any], torch.Tensor]:
    require_async_backend(policy_generation)
    outputs = await _collect_async_outputs(policy_generation, generation_input_data, greedy, tokenizer)
    outputs = conform_outputs(outputs, generation_input_data, policy_generation, tokenizer)
    generated_ids, metrics = _append_generations(outputs, batch, tokenizer, input_lengths, include_logprobs)
    return batch, generated_ids, metrics, outputs["truncated"]


def _generation_input(message_logs: Sequence[LLMMessageLogType], stop_strings: Sequence[Optional[list[str]]],
                      pad_token_id: int, max_seq_len: int, limits: GenerationLimits
                      ) -> tuple[BatchedDataDict[Any], torch.Tensor]:
    """The batch to generate from: each sample capped to the room left under max_seq_len (and `limits`), with its
    own stop strings after those of `limits`."""
    flat, input_lengths = batched_message_log_to_flat_message(message_logs, pad_token_id)
    data: BatchedDataDict[Any] = BatchedDataDict(
        input_ids=flat["token_ids"],
        input_lengths=input_lengths,
        stop_strings=[merge_stop_strings(limits.stop_strings, own) or None for own in stop_strings],
        max_new_tokens=(max_seq_len - input_lengths).clamp(min=0, max=limits.max_new_tokens),
    )
    return data, input_lengths


# ---- environments --------------------------------------------------------------------------------------------


async def _step(env: Any, task_name: str, logs: list[Any], metadata: list[Any]) -> EnvironmentReturn:
    """One environment's step (ours, a coroutine or plain function, or a Ray actor handle: environments/calling.py)."""
    where = f"environment of task '{task_name}' ({type(env).__name__})"
    try:
        return await step_environment(env, logs, metadata, where)
    except EnvironmentStepError:
        raise
    except Exception as exc:
        raise EnvironmentStepError(f"{where} failed: {type(exc).__name__}: {exc}") from exc


async def calculate_rewards_async(batch: BatchedDataDict[DatumSpec],
                                  task_to_env: dict[str, EnvironmentInterface]) -> EnvironmentReturn:
    """Step every sample's environment: one call per task name, all tasks concurrently, results in batch order."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, task_name in enumerate(batch["task_name"]):
        groups[task_name].append(i)
    unknown = sorted(set(groups) - set(task_to_env))
    if unknown:
        where = "; ".join(f"'{name}' (samples {groups[name]})" for name in unknown)
        raise UnknownTaskError(f"no environment for task {where}; task_to_env has {sorted(task_to_env)}")
    names = list(groups)
    for name in names:
        check_environment(name, task_to_env[name])
    returns = await asyncio.gather(*(
        _step(task_to_env[name], name, [chat_view(batch["message_log"][i]) for i in groups[name]],
              [batch["extra_env_info"][i] for i in groups[name]])
        for name in names
    ))
    size = batch.size
    observations: list[Any] = [None] * size
    metadata: list[Any] = [None] * size
    stop_strings: list[Any] = [None] * size
    answers: list[Any] = [None] * size
    rewards = torch.zeros(size, dtype=torch.float32)
    terminateds = torch.zeros(size, dtype=torch.bool)
    for name, result in zip(names, returns):
        for j, i in enumerate(groups[name]):
            observations[i] = result.observations[j]
            metadata[i] = result.metadata[j]
            stop_strings[i] = result.next_stop_strings[j]
            answers[i] = None if result.answers is None else result.answers[j]
            rewards[i] = float(result.rewards[j])
            terminateds[i] = bool(result.terminateds[j])
    return EnvironmentReturn(observations, metadata, stop_strings, rewards, terminateds, answers)


def calculate_rewards(batch: BatchedDataDict[DatumSpec],
                      task_to_env: dict[str, EnvironmentInterface]) -> EnvironmentReturn:
    """Synchronous `calculate_rewards_async`."""
    return run_sync(calculate_rewards_async(batch, task_to_env))


# ---- one turn's bookkeeping, shared by the batched and the per-sample loops --------------------------------------


@dataclass
class _SampleProgress:
    """What a sample's rollout has done so far."""

    turns: int = 0
    assistant_tokens: int = 0
    env_tokens: int = 0
    total_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False  # a turn hit a length limit (NeMo RL's `truncated`), whether or not the episode went on
    max_turns_reached: bool = False
    done: bool = False  # the episode is over: terminated, out of room under max_seq_len, or ended on a truncated turn
    turn_gen_tokens: list[int] = field(default_factory=list)


def _apply_env_turn(sample: dict[str, Any], progress: _SampleProgress, template: ChatTemplate, max_seq_len: int,
                    generation_truncated: bool, observation: dict[str, str], reward: float, terminated: bool,
                    next_stop_strings: Optional[list[str]], metadata: Optional[dict[str, Any]],
                    end_on_truncated_turn: bool) -> None:
    """Append the observation (cut to the room left under max_seq_len) and update the sample for the next turn.

    A turn cut by max_new_tokens marks the sample truncated but, as in NeMo RL's run_multi_turn_rollout, the
    episode goes on (the environment judges what was written) unless `end_on_truncated_turn`; reaching
    max_seq_len always ends it, since nothing more fits."""
    message_log = sample["message_log"]
    generated = len(message_log[-1]["token_ids"])
    progress.turn_gen_tokens.append(generated)
    progress.assistant_tokens += generated
    progress.total_reward += reward
    progress.truncated |= generation_truncated
    obs_ids = template.observation_ids(message_log, observation)
    room = max(0, max_seq_len - message_log_length(message_log))
    out_of_room = len(obs_ids) >= room
    if out_of_room:
        obs_ids = obs_ids[:room]
        progress.truncated = True
    message_log.append({"role": observation["role"], "content": observation["content"],
                        "token_ids": torch.tensor(obs_ids, dtype=torch.long)})
    progress.env_tokens += len(obs_ids)
    progress.turns += 1
    progress.terminated |= terminated
    progress.done = progress.terminated or out_of_room or (end_on_truncated_turn and generation_truncated)
    if not progress.done:
        sample["stop_strings"] = next_stop_strings
        if metadata is not None:
            sample["extra_env_info"] = metadata


def _sample_metrics(progress: _SampleProgress, message_log: LLMMessageLogType) -> dict[str, Any]:
    return {
        "turn_count": progress.turns,
        "total_tokens": progress.assistant_tokens + progress.env_tokens,  # prompt excluded, as in the batch keys
        "sequence_length": message_log_length(message_log),
        "assistant_tokens": progress.assistant_tokens,
        "env_tokens": progress.env_tokens,
        "terminated": progress.terminated,
        "truncated": progress.truncated,
        "max_turns_reached": progress.max_turns_reached,
        "total_reward": progress.total_reward,
        "turn_gen_tokens": list(progress.turn_gen_tokens),
    }


def _finish_batch(batch: BatchedDataDict[DatumSpec], progresses: Sequence[_SampleProgress]) -> BatchedDataDict[Any]:
    batch["total_reward"] = torch.tensor([p.total_reward for p in progresses], dtype=torch.float32)
    batch["truncated"] = torch.tensor([p.truncated for p in progresses], dtype=torch.bool)
    return batch


def _as_batch(input_batch: BatchedDataDict[DatumSpec] | Sequence[DatumSpec]) -> BatchedDataDict[DatumSpec]:
    """A private deep copy, so a rollout never changes the caller's batch."""
    batch: BatchedDataDict[DatumSpec]
    if isinstance(input_batch, BatchedDataDict):
        batch = BatchedDataDict(copy.deepcopy(dict(input_batch)))
    else:
        samples = list(input_batch)
        keys = {key for sample in samples for key in sample}
        batch = BatchedDataDict({key: [copy.deepcopy(s.get(key)) for s in samples] for key in keys})
    if "stop_strings" not in batch:
        batch["stop_strings"] = [None] * batch.size
    return batch


# ---- batched turns ---------------------------------------------------------------------------------------------


def run_multi_turn_rollout(
    policy_generation: GenerationInterface,
    input_batch: BatchedDataDict[DatumSpec],
    tokenizer: Any,
    task_to_env: dict[str, EnvironmentInterface],
    max_seq_len: int,
    max_rollout_turns: int = UNLIMITED_TURNS,
    greedy: bool = False,
    *,
    end_on_truncated_turn: bool = False,
    limits: GenerationLimits = NO_LIMITS,
) -> tuple[BatchedDataDict[DatumSpec], dict[str, Any]]:
    """Run every sample turn by turn, all still-active samples in one generation call per turn.

    Returns the batch with full message logs, `total_reward` and `truncated`, and the rollout metrics. A turn cut
    by max_new_tokens does not end its episode unless `end_on_truncated_turn` (see `_apply_env_turn`).
    """
    batch = _as_batch(input_batch)
    template = ChatTemplate(tokenizer)
    progresses = [_SampleProgress() for _ in range(batch.size)]
    active = list(range(batch.size))
    for _ in range(max_rollout_turns):
        if not active:
            break
        active_batch = batch.select_indices(active)  # rows are the same message-log objects as in `batch`
        data, input_lengths = _generation_input(active_batch["message_log"], active_batch["stop_strings"],
                                                pad_token_id_of(policy_generation, tokenizer), max_seq_len, limits)
        _, _, _, truncated = _generate_turn(policy_generation, data, active_batch, tokenizer, input_lengths,
                                            include_logprobs=True, greedy=greedy)
        env_return = calculate_rewards(active_batch, task_to_env)
        for j, i in enumerate(active):
            sample = {key: batch[key][i] for key in ("message_log", "stop_strings", "extra_env_info")}
            _apply_env_turn(sample, progresses[i], template, max_seq_len, bool(truncated[j]),
                            env_return.observations[j], float(env_return.rewards[j]),
                            bool(env_return.terminateds[j]), env_return.next_stop_strings[j], env_return.metadata[j],
                            end_on_truncated_turn)
            batch["stop_strings"][i], batch["extra_env_info"][i] = sample["stop_strings"], sample["extra_env_info"]
        active = [i for i in active if not progresses[i].done]
    for i in active:
        progresses[i].max_turns_reached = True
    return _finish_batch(batch, progresses), batch_rollout_metrics(progresses)


# ---- per-sample turns, concurrently ----------------------------------------------------------------------------


async def _generate_one(policy_generation: GenerationInterface, sample: dict[str, Any], tokenizer: Any,
                        max_seq_len: int, greedy: bool, limits: GenerationLimits) -> bool:
    """Generate one turn for one sample; returns whether the generation was truncated."""
    one: BatchedDataDict[Any] = BatchedDataDict(message_log=[sample["message_log"]],
                                                stop_strings=[sample.get("stop_strings")])
    data, input_lengths = _generation_input(one["message_log"], one["stop_strings"],
                                            pad_token_id_of(policy_generation, tokenizer), max_seq_len, limits)
    _, _, _, truncated = await _generate_turn_async(policy_generation, data, one, tokenizer, input_lengths,
                                                    include_logprobs=True, greedy=greedy)
    return bool(truncated[0])


async def run_sample_multi_turn_rollout(
    sample_idx: int,
    initial_sample_state: Mapping[str, Any],
    policy_generation: GenerationInterface,
    tokenizer: Any,
    task_to_env: dict[str, EnvironmentInterface],
    max_seq_len: int,
    max_rollout_turns: int = UNLIMITED_TURNS,
    greedy: bool = False,
    *,
    end_on_truncated_turn: bool = False,
    limits: GenerationLimits = NO_LIMITS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One sample's own turn loop: one generation request per turn, its environment stepped alone.

    Returns the final sample state (the input sample with its full message log, `total_reward`, `truncated`)
    and its metrics. A failed generation or environment step raises SampleRolloutError.
    """
    require_async_backend(policy_generation)
    sample: dict[str, Any] = copy.deepcopy(dict(initial_sample_state))
    sample.setdefault("stop_strings", None)
    template = ChatTemplate(tokenizer)
    progress = _SampleProgress()
    for turn in range(max_rollout_turns):
        try:
            truncated = await _generate_one(policy_generation, sample, tokenizer, max_seq_len, greedy, limits)
        except Exception as exc:
            raise SampleRolloutError(sample_idx, "generation", turn, exc) from exc
        one: BatchedDataDict[Any] = BatchedDataDict(message_log=[sample["message_log"]],
                                                    extra_env_info=[sample.get("extra_env_info")],
                                                    task_name=[sample["task_name"]])
        try:
            env_return = await calculate_rewards_async(one, task_to_env)
            _apply_env_turn(sample, progress, template, max_seq_len, truncated, env_return.observations[0],
                            float(env_return.rewards[0]), bool(env_return.terminateds[0]),
                            env_return.next_stop_strings[0], env_return.metadata[0], end_on_truncated_turn)
        except Exception as exc:
            raise SampleRolloutError(sample_idx, "environment", turn, exc) from exc
        if progress.done:
            break
    else:
        progress.max_turns_reached = True
    sample["total_reward"] = progress.total_reward
    sample["truncated"] = progress.truncated
    return sample, _sample_metrics(progress, sample["message_log"])


async def run_samples_concurrently(
    policy_generation: GenerationInterface,
    input_batch: BatchedDataDict[DatumSpec] | Sequence[DatumSpec],
    tokenizer: Any,
    task_to_env: dict[str, EnvironmentInterface],
    max_seq_len: int,
    max_rollout_turns: int = UNLIMITED_TURNS,
    greedy: bool = False,
    *,
    end_on_truncated_turn: bool = False,
    limits: GenerationLimits = NO_LIMITS,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every sample's `run_sample_multi_turn_rollout` at once; the first failure cancels the rest and is raised."""
    require_async_backend(policy_generation)
    batch = _as_batch(input_batch)
    samples = [{key: batch[key][i] for key in batch} for i in range(batch.size)]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(run_sample_multi_turn_rollout(
                i, sample, policy_generation, tokenizer, task_to_env, max_seq_len, max_rollout_turns, greedy,
                end_on_truncated_turn=end_on_truncated_turn, limits=limits))
                for i, sample in enumerate(samples)]
    except* SampleRolloutError as failures:
        first = failures.exceptions[0]
        raise first from first.__cause__
    results = [task.result() for task in tasks]
    return [r[0] for r in results], [r[1] for r in results]


def run_async_multi_turn_rollout(
    policy_generation: GenerationInterface,
    input_batch: BatchedDataDict[DatumSpec],
    tokenizer: Any,
    task_to_env: dict[str, EnvironmentInterface],
    max_seq_len: int,
    max_rollout_turns: int = UNLIMITED_TURNS,
    greedy: bool = False,
    *,
    end_on_truncated_turn: bool = False,
    limits: GenerationLimits = NO_LIMITS,
) -> tuple[BatchedDataDict[DatumSpec], dict[str, Any]]:
    """Run each sample's turn loop concurrently (`run_sample_multi_turn_rollout`) and return the batch in input
    order with the batched metric keys plus `mean_total_reward`, `max_total_reward`, `min_total_reward`."""
    samples, sample_metrics = run_sync(run_samples_concurrently(
        policy_generation, input_batch, tokenizer, task_to_env, max_seq_len, max_rollout_turns, greedy,
        end_on_truncated_turn=end_on_truncated_turn, limits=limits))
    keys = list(samples[0]) if samples else []
    batch: BatchedDataDict[DatumSpec] = BatchedDataDict(
        {key: [s[key] for s in samples] for key in keys if key not in ("total_reward", "truncated")})
    progresses = [_progress_from(m) for m in sample_metrics]
    return _finish_batch(batch, progresses), batch_rollout_metrics(progresses)


def _progress_from(metrics: dict[str, Any]) -> _SampleProgress:
    return _SampleProgress(
        turns=metrics["turn_count"], assistant_tokens=metrics["assistant_tokens"], env_tokens=metrics["env_tokens"],
        total_reward=metrics["total_reward"], terminated=metrics["terminated"], truncated=metrics["truncated"],
        max_turns_reached=metrics["max_turns_reached"], turn_gen_tokens=metrics["turn_gen_tokens"],
    )


def aggregate_sample_metrics(sample_metrics: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The batched metric keys over per-sample metrics of `run_sample_multi_turn_rollout`."""
    return batch_rollout_metrics([_progress_from(m) for m in sample_metrics])
