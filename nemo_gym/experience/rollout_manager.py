"""RolloutManager: one prompt in, one PromptGroupRecord (N completions of it) out (NeMo RL's rollout_manager).

Two ways to produce the N completions:
- `AsyncRolloutImpl` runs N multi-turn rollouts of the policy against the environments in this process, concurrently
  (rollouts.run_sample_multi_turn_rollout).
- `AsyncNemoGymRolloutImpl` sends N rows to the agent servers' `/run` through the collection toolkit's Python API
  (RolloutCollectionHelper), with the collector's retry, timeout and failure rules, and rebuilds each completion's
  message log from the token ids vLLM reported on the agent's response items.
Either way, a group with a failed member is not returned: its siblings are cancelled and PromptGroupError is raised.
"""

import asyncio
import copy
import time
from typing import Any, Optional

from nemo_gym.experience.agents.params import agent_request_params
from nemo_gym.experience.agents.results import result_to_completion
from nemo_gym.experience.environments.calling import check_environment
from nemo_gym.experience.environments.interfaces import EnvironmentInterface
from nemo_gym.experience.errors import ExperienceError, PromptGroupError
from nemo_gym.experience.generation.interfaces import GenerationConfig, GenerationInterface
from nemo_gym.experience.generation.samples import require_config
from nemo_gym.experience.interfaces import (
    NEMO_GYM_ROLLOUT_INDEX_KEY,
    NEMO_GYM_TASK_INDEX_KEY,
    Completion,
    DatumSpec,
    LLMMessageLogType,
    PromptGroupRecord,
)
from nemo_gym.experience.turns.backend_compat import require_async_backend
from nemo_gym.experience.turns.generation_limits import generation_limits
from nemo_gym.experience.turns.message_log import generation_weight_versions
from nemo_gym.experience.turns.rollout_metrics import CompletionCounts, batch_rollout_metrics
from nemo_gym.experience.turns.rollouts import UNLIMITED_TURNS, aggregate_sample_metrics, run_sample_multi_turn_rollout
from nemo_gym.rollout_collection.helper import RolloutCollectionHelper

TokenizerType = Any


def _prompt_of(input_sample: DatumSpec) -> LLMMessageLogType:
    return copy.deepcopy(input_sample["message_log"])


def _record(input_sample: DatumSpec, completions: list[Completion], metrics: dict[str, Any],
            started: float, **metadata: Any) -> PromptGroupRecord:
    return PromptGroupRecord(
        prompt_idx=int(input_sample.get("idx", -1)),
        prompt=_prompt_of(input_sample),
        extra_env_info=copy.deepcopy(input_sample.get("extra_env_info")),
        metadata={"task_name": input_sample.get("task_name"), "generation_time_s": time.monotonic() - started,
                  **metadata},
        completions=completions,
        rollout_metrics=metrics,
        loss_multiplier=float(input_sample.get("loss_multiplier", 1.0)),
    )


class AsyncRolloutImpl:
    """Per-prompt multi-turn rollouts in this process: each `run_rollout` runs its N generations concurrently.

    The backend generates with its own config. A `generation_config` given as well (the trajectory collector passes
    its `policy.generation`) is applied and checked (turns/generation_limits.py): its `max_new_tokens` and
    `stop_strings` go with every request, and the settings only the backend can apply (temperature, top_p, top_k,
    stop_token_ids) must be the backend's, or construction fails naming each difference.
    """

    def __init__(self, tokenizer: TokenizerType, task_to_env: dict[str, EnvironmentInterface],
                 num_generations_per_prompt: int, max_seq_len: int, policy_generation: GenerationInterface,
                 max_rollout_turns: int = UNLIMITED_TURNS, greedy: bool = False, *,
                 end_on_truncated_turn: bool = False, generation_config: Optional[GenerationConfig] = None) -> None:
        if num_generations_per_prompt < 1:
            raise ValueError(f"num_generations_per_prompt must be at least 1, got {num_generations_per_prompt}")
        require_async_backend(policy_generation)
        for task_name, env in task_to_env.items():
            check_environment(task_name, env)
        self.tokenizer = tokenizer
        self.task_to_env = task_to_env
        self.num_generations_per_prompt = num_generations_per_prompt
        self.max_seq_len = max_seq_len
        self.policy_generation = policy_generation
        self.max_rollout_turns = max_rollout_turns or UNLIMITED_TURNS
        self.greedy = greedy
        self.end_on_truncated_turn = end_on_truncated_turn
        self.limits = generation_limits(generation_config, policy_generation, greedy=greedy)

    async def run_rollout(self, input_sample: DatumSpec) -> PromptGroupRecord:
        """Run `num_generations_per_prompt` rollouts of one prompt; PromptGroupError if any of them fails."""
        started = time.monotonic()
        prompt_idx = int(input_sample.get("idx", -1))
        tasks: list[asyncio.Task[tuple[Completion, dict[str, Any]]]] = []
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._run_single_rollout(input_sample, j))
                         for j in range(self.num_generations_per_prompt)]
        except* Exception as failures:
            first = failures.exceptions[0]
            traj_idx = getattr(first, "sample_index", -1)
            raise PromptGroupError(prompt_idx, traj_idx, first) from first
        results = [task.result() for task in tasks]
        completions = [completion for completion, _ in results]
        return _record(input_sample, completions, aggregate_sample_metrics([m for _, m in results]), started)

    async def _run_single_rollout(self, input_sample: DatumSpec, traj_idx: int) -> tuple[Completion, dict[str, Any]]:
        """One multi-turn rollout of generation `traj_idx`."""
        final, metrics = await run_sample_multi_turn_rollout(
            traj_idx, input_sample, self.policy_generation, self.tokenizer, self.task_to_env, self.max_seq_len,
            self.max_rollout_turns, self.greedy, end_on_truncated_turn=self.end_on_truncated_turn,
            limits=self.limits)
        completion = Completion(
            message_log=final["message_log"],
            env_extras=final.get("extra_env_info"),
            truncated=bool(final["truncated"]),
            reward=float(final["total_reward"]),
            generation_weight_versions=generation_weight_versions(final["message_log"]),
        )
        return completion, metrics


class AsyncNemoGymRolloutImpl:
    """Per-prompt rollouts through the agent servers: N rows of one prompt go to `/run` as one batch.

    The prompt's NeMo Gym row (`responses_create_params`, `agent_ref`, verifier fields) is the sample's
    `extra_env_info`, as NeMo RL's NeMo Gym datasets store it. `head_server_url` (or a ready `rollout_helper`, not
    both) says where the servers are; with neither, ng_run's default head server. `generation_config` needs
    `max_new_tokens`; its settings replace the row's (agents/params.py). The agent decides whether a turn cut by
    max_new_tokens ends the rollout (multi_turn_agent goes on, as the native default does), so
    `end_on_truncated_turn=True` is refused here.
    """

    def __init__(self, tokenizer: TokenizerType, task_to_env: dict[str, EnvironmentInterface],
                 num_generations_per_prompt: int, max_seq_len: int, generation_config: GenerationConfig,
                 max_rollout_turns: Optional[int] = None, greedy: bool = False, *,
                 end_on_truncated_turn: bool = False, agent_name: Optional[str] = None,
                 head_server_url: Optional[str] = None,
                 rollout_helper: Optional[RolloutCollectionHelper] = None) -> None:
        if num_generations_per_prompt < 1:
            raise ValueError(f"num_generations_per_prompt must be at least 1, got {num_generations_per_prompt}")
        if generation_config is None:
            raise ValueError("AsyncNemoGymRolloutImpl needs a generation_config (max_new_tokens, temperature, ...)")
        require_config(generation_config, ("max_new_tokens",), "AsyncNemoGymRolloutImpl")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be positive, got {max_seq_len}")
        if end_on_truncated_turn:
            raise ValueError("end_on_truncated_turn=True cannot be honoured through the agent servers "
                             "(use_nemo_gym=True): the agent decides whether a cut turn ends the rollout")
        if rollout_helper is not None and head_server_url is not None:
            raise ValueError("give head_server_url or rollout_helper, not both: the helper already has its head server")
        self.tokenizer = tokenizer
        self.task_to_env = task_to_env
        self.num_generations_per_prompt = num_generations_per_prompt
        self.max_seq_len = max_seq_len
        self.generation_config = generation_config
        self.max_rollout_turns = max_rollout_turns
        self.greedy = greedy
        self.agent_name = agent_name
        self.rollout_helper = rollout_helper or RolloutCollectionHelper(head_server_config=head_server_url)

    def retry_by_group(self, group_timeout_s: Optional[float]) -> None:
        """The caller retries whole groups (the trajectory collector): run each rollout once, within the group's
        deadline, so that the group attempt is the one retry budget (docs/architecture.md, "Retry budget")."""
        self.rollout_helper = self.rollout_helper.for_prompt_groups(group_timeout_s)

    def _build_inputs(self, input_sample: DatumSpec) -> list[dict[str, Any]]:
        """N rows of the prompt's NeMo Gym row, keyed (prompt idx, j), with the generation config, greedy, the
        sample's stop strings and the rollout limits applied and the token ids of every generation asked for
        (agents/params.py)."""
        row = input_sample.get("extra_env_info")
        if not isinstance(row, dict) or not isinstance(row.get("responses_create_params"), dict):
            raise ExperienceError(
                f"prompt {input_sample.get('idx')}: a NeMo Gym sample needs its row (with responses_create_params) "
                f"as extra_env_info")
        params = agent_request_params(row["responses_create_params"], self.generation_config, greedy=self.greedy,
                                      stop_strings=input_sample.get("stop_strings"), max_seq_len=self.max_seq_len,
                                      max_rollout_turns=self.max_rollout_turns)
        base = {**row, "responses_create_params": params}
        if self.agent_name and "agent_ref" not in base:
            base["agent_ref"] = {"name": self.agent_name}
        if "agent_ref" not in base:
            raise ExperienceError(f"prompt {input_sample.get('idx')}: the row has no agent_ref and no agent_name "
                                  f"was given")
        prompt_idx = int(input_sample.get("idx", 0))
        return [{**copy.deepcopy(base), NEMO_GYM_TASK_INDEX_KEY: prompt_idx, NEMO_GYM_ROLLOUT_INDEX_KEY: j}
                for j in range(self.num_generations_per_prompt)]

    async def run_rollout(self, input_sample: DatumSpec) -> PromptGroupRecord:
        """Run `num_generations_per_prompt` rollouts of one prompt through the agents; PromptGroupError on failure."""
        started = time.monotonic()
        inputs = self._build_inputs(input_sample)
        completions, metrics = await self._run_rollouts(inputs, int(input_sample.get("idx", -1)))
        agent = inputs[0]["agent_ref"]["name"]
        return _record(input_sample, completions, metrics, started, agent_name=agent)

    async def _run_rollouts(self, inputs: list[dict[str, Any]], prompt_idx: int
                            ) -> tuple[list[Completion], dict[str, Any]]:
        """Dispatch the rows and turn each result into a Completion, in rollout-index order."""
        by_index: dict[int, tuple[Completion, CompletionCounts]] = {}
        stream = self.rollout_helper.run_examples(inputs)
        try:
            async for row, result in stream:
                traj_idx = row[NEMO_GYM_ROLLOUT_INDEX_KEY]
                assert isinstance(result, dict)  # failures raise: the stream does not return them
                try:
                    by_index[traj_idx] = result_to_completion(result, self.tokenizer, self.max_seq_len,
                                                              self.max_rollout_turns)
                except ExperienceError as exc:
                    raise PromptGroupError(prompt_idx, traj_idx, exc) from exc
        except PromptGroupError:
            raise
        except Exception as exc:
            raise PromptGroupError(prompt_idx, getattr(exc, "rollout_index", -1), exc) from exc
        finally:
            await stream.aclose()
        ordered = [by_index[j] for j in sorted(by_index)]
        metrics = batch_rollout_metrics([counts for _, counts in ordered])
        metrics[f"{inputs[0]['agent_ref']['name']}/mean_reward"] = metrics.get("mean_total_reward", 0.0)
        return [completion for completion, _ in ordered], metrics


class RolloutManager:
    """Routes `run_rollout` to AsyncRolloutImpl (`use_nemo_gym=False`, needs `policy_generation`) or to
    AsyncNemoGymRolloutImpl (`use_nemo_gym=True`, needs `generation_config`).

    Every argument is named here, so a misspelt one is a TypeError. The agent path's own (`agent_name`,
    `head_server_url`, `rollout_helper`) are refused on the native path; `policy_generation` is accepted and unused on
    the agent path, where the agents' model server generates (NeMo RL passes it on both).
    """

    def __init__(self, tokenizer: TokenizerType, task_to_env: dict[str, EnvironmentInterface],
                 num_generations_per_prompt: int, max_seq_len: int, max_rollout_turns: Optional[int] = None,
                 policy_generation: Optional[GenerationInterface] = None,
                 generation_config: Optional[GenerationConfig] = None, use_nemo_gym: bool = False, *,
                 greedy: bool = False, end_on_truncated_turn: bool = False, agent_name: Optional[str] = None,
                 head_server_url: Optional[str] = None,
                 rollout_helper: Optional[RolloutCollectionHelper] = None) -> None:
        self.impl: AsyncRolloutImpl | AsyncNemoGymRolloutImpl
        if use_nemo_gym:
            if generation_config is None:
                raise ValueError("RolloutManager(use_nemo_gym=True) needs a generation_config (max_new_tokens, ...)")
            self.impl = AsyncNemoGymRolloutImpl(
                tokenizer, task_to_env, num_generations_per_prompt, max_seq_len, generation_config,
                max_rollout_turns, greedy, end_on_truncated_turn=end_on_truncated_turn, agent_name=agent_name,
                head_server_url=head_server_url, rollout_helper=rollout_helper)
        else:
            agent_only = {"agent_name": agent_name, "head_server_url": head_server_url,
                          "rollout_helper": rollout_helper}
            given = [name for name, value in agent_only.items() if value is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only for rollouts through the agent servers "
                                 f"(use_nemo_gym=True)")
            if policy_generation is None:
                raise ValueError("RolloutManager(use_nemo_gym=False) needs a policy_generation backend")
            self.impl = AsyncRolloutImpl(tokenizer, task_to_env, num_generations_per_prompt, max_seq_len,
                                         policy_generation, max_rollout_turns or UNLIMITED_TURNS, greedy,
                                         end_on_truncated_turn=end_on_truncated_turn,
                                         generation_config=generation_config)
        self.use_nemo_gym = use_nemo_gym

    def retry_by_group(self, group_timeout_s: Optional[float]) -> None:
        """The caller retries whole groups within `group_timeout_s`: leave the retries to it (the native path has
        no rollout-level retry to hand over)."""
        if isinstance(self.impl, AsyncNemoGymRolloutImpl):
            self.impl.retry_by_group(group_timeout_s)

    async def run_rollout(self, input_sample: DatumSpec) -> PromptGroupRecord:
        return await self.impl.run_rollout(input_sample)
