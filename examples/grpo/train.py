"""GRPO on the bundled SmolLM2-135M-Instruct, float32 on CPU, fed by the asynchronous trajectory collector.

    python -m examples.grpo.train --task math --steps 20            # native MathEnvironment, starts its own vLLM
    python -m examples.grpo.train --task number_guess --agents      # the number-guessing game through the agents
    python -m examples.grpo.train --vllm-url http://127.0.0.1:8000/v1 ...   # a vLLM started with VLLM_SERVER_DEV_MODE=1
    python -m examples.grpo.train --task math --synchronous         # generate, then train, then push: no overlap

Each step: take the step's prompt groups from the replay buffer, compute group-normalized advantages and NeMo RL's
clipped token-level loss on the completions' own token ids, step AdamW, write the weights, load them into vLLM,
tell the collector the new weight version, carry on.

The trainer computes in float32, and so does the vLLM it starts (the only pairing whose log-probs agree exactly,
on any CPU). `--generator-dtype bfloat16` buys a faster generator on a CPU with native bf16 (or a GPU) at a
measured mismatch of token_mult_prob_error 1.03-1.05: the run says so when it starts. Truncated importance sampling
(NeMo RL's correction, capped at `--importance-sampling-cap`) weights each token by p_trainer / p_generation; it is
on by default whenever the generator can disagree with the trainer: batches older than the weights (asynchronous
GRPO with --max-age >= 1) or another dtype. `--importance-sampling on|off` decides it instead.

With --synchronous there is no collector: each step first generates its groups on the weights just pushed, so
generation and training never overlap (the baseline that asynchronous GRPO is measured against). Held-out rows (the
last --eval-rows of the file, never trained on) are scored before and after, greedily and sampled. Per step: OUT/steps.csv and W&B (offline unless
WANDB_MODE is set); OUT/summary.json at the end.
"""

import argparse
import asyncio
import json
import random
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from examples.grpo.servers import AGENTS, REPO_ROOT, SERVED_NAME, agent_stack, served_dtype, vllm_server
from examples.grpo.step_log import StepLog, StepRecord, wandb_run
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.weights import write_weights
from nemo_gym.experience.grpo import grpo_step, training_batch
from nemo_gym.experience.interfaces import DatumSpec, PromptGroupRecord
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.jsonl_records import iter_records

MAX_SEQ_LEN = 2048
DATA = REPO_ROOT / "nemo_gym" / "resources_servers"
DEFAULT_ROWS = {"math": DATA / "math" / "data" / "arithmetic_example.jsonl",
                "number_guess": DATA / "number_guess" / "data" / "example.jsonl"}
DEFAULT_TURNS = {"math": 1, "number_guess": 8}
# The first answer checks import sympy in the verifier processes: on a loaded 2-core machine that alone can take
# tens of seconds, and a timed-out check is a failed group, not a reward.
VERIFY_TIMEOUT_S = 300.0
TRAINER_DTYPE = "float32"
# NeMo RL's truncated_importance_sampling_ratio: a token counts at most twice what the generator's sampling gave it.
IMPORTANCE_SAMPLING_CAP = 2.0


@dataclass
class GRPOConfig:
    task: str = "math"  # "math" or "number_guess"
    use_nemo_gym: bool = False  # roll out through the agent servers instead of in this process
    rows: Optional[Path] = None  # NeMo Gym JSONL rows (default: the task's shipped example)
    eval_rows: int = 8  # the last rows of the file: held out, scored before and after
    eval_samples: int = 4  # sampled answers per held-out row (besides the greedy one)
    steps: int = 10
    prompts_per_step: int = 4
    generations_per_prompt: int = 8
    max_new_tokens: int = 32
    max_turns: Optional[int] = None  # default: 1 for math, 8 for the game
    temperature: float = 1.0
    learning_rate: float = 5e-6
    max_trajectory_age: int = 1
    synchronous: bool = False  # no collector: generate each step's groups after the previous push (age 0)
    generator_dtype: str = TRAINER_DTYPE  # the dtype of the vLLM this run starts
    importance_sampling: Optional[bool] = None  # truncated importance sampling (default: see corrects_off_policy)
    importance_sampling_cap: float = IMPORTANCE_SAMPLING_CAP
    micro_batch_size: int = 8
    weight_transport: str = "disk"  # how pushes reach vLLM: "disk" (a folder) or "gloo" (the tensors, no folder)
    seed: int = 0
    model: Path = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
    vllm_url: Optional[str] = None  # default: start a vLLM (dev mode, 127.0.0.1) for this run
    out_dir: Path = Path("grpo_out")
    wandb: bool = True
    sample_timeout_s: float = 1800.0
    max_wall_s: Optional[float] = None  # stop training after the step that ends past this many seconds of the run
    evaluate: bool = True  # score the held-out rows before and after (a caller with its own evaluator skips it)

    @property
    def turns(self) -> int:
        return self.max_turns if self.max_turns is not None else DEFAULT_TURNS[self.task]

    def corrects_off_policy(self, generator_dtype: str) -> bool:
        """Whether steps weight tokens by truncated importance sampling: as asked, or else whenever batches can be
        older than the weights or the generator computes in another dtype than the trainer."""
        if self.importance_sampling is not None:
            return self.importance_sampling
        return (not self.synchronous and self.max_trajectory_age > 0) or generator_dtype != TRAINER_DTYPE


def dtype_notice(generator_dtype: str, corrected: bool) -> Optional[str]:
    """What a run says at start when its generator does not compute in the trainer's dtype (None when it does)."""
    if generator_dtype == TRAINER_DTYPE:
        return None
    correction = ("truncated importance sampling corrects for it" if corrected else
                  "importance sampling is OFF, so training follows the generator's rounding, not the trainer's policy")
    return (f"note: the generator computes in {generator_dtype}, the trainer in {TRAINER_DTYPE}: their log-probs "
            f"disagree (token_mult_prob_error about 1.03-1.05 for bf16, logged each step in steps.csv); {correction}")


@dataclass
class RunResult:
    eval_before: float  # held-out mean reward, greedy
    eval_sampled_before: float  # held-out mean reward at the training temperature, eval_samples per row
    eval_after: float = float("nan")
    eval_sampled_after: float = float("nan")
    records: list[StepRecord] = field(default_factory=list)
    weights: Optional[Path] = None  # the folder of the last weights pushed (the trained policy)
    generator_dtype: str = ""  # what the vLLM computed in


def load_datums(config: GRPOConfig, tokenizer: Any) -> tuple[list[DatumSpec], list[DatumSpec]]:
    """(training prompts, held-out prompts) from the rows file; the last `eval_rows` rows are held out."""
    path = config.rows or DEFAULT_ROWS[config.task]
    template = ChatTemplate(tokenizer)
    datums = [datum_from_row(row, template, config.task, idx) for idx, (_, row) in enumerate(iter_records(path))]
    split = len(datums) - config.eval_rows
    if config.eval_rows < 1 or split < config.prompts_per_step:
        raise ValueError(f"{path}: {len(datums)} rows, {config.eval_rows} held out: need at least 1 held out and "
                         f"{config.prompts_per_step} (a step's prompts) to train on")
    return datums[:split], datums[split:]


def trainable_model(path: Path) -> PreTrainedModel:
    """The policy in float32, with a tied embedding frozen.

    vLLM 0.32's CPU build reloads the input embedding but keeps computing logits with the lm_head it packed at
    start-up, so a changed tied embedding would leave vLLM serving a different model than the trainer's (measured:
    token_mult_prob_error 1.07 after one perturbed push). Every other weight reloads exactly."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if model.config.tie_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    return model.eval()


def run_groups(manager: RolloutManager, datums: list[DatumSpec]) -> list[PromptGroupRecord]:
    """One prompt group per datum, all generating at once."""
    async def all_groups() -> list[PromptGroupRecord]:
        return list(await asyncio.gather(*(manager.run_rollout(d) for d in datums)))

    return asyncio.run(all_groups())


def mean_reward(manager: RolloutManager, datums: list[DatumSpec]) -> float:
    rewards = [reward for record in run_groups(manager, datums) for reward in record.rewards]
    return sum(rewards) / len(rewards)


class Rollouts:
    """Builds the rollout managers of a run (natively or through the agents): N sampled completions per prompt, or
    one greedy one."""

    def __init__(self, config: GRPOConfig, tokenizer: Any, policy: VllmHttpGeneration, envs: dict[str, Any],
                 head_url: Optional[str]) -> None:
        self.config, self.tokenizer, self.policy, self.envs, self.head_url = config, tokenizer, policy, envs, head_url

    def manager(self, generations: int, greedy: bool) -> RolloutManager:
        config = self.config
        if config.use_nemo_gym:
            generation = {"temperature": 0.0 if greedy else config.temperature, "max_new_tokens": config.max_new_tokens}
            return RolloutManager(self.tokenizer, {}, generations, MAX_SEQ_LEN, config.turns,
                                  generation_config=generation, use_nemo_gym=True, head_server_url=self.head_url,
                                  agent_name=AGENTS[config.task])
        return RolloutManager(self.tokenizer, self.envs, generations, MAX_SEQ_LEN, config.turns,
                              policy_generation=self.policy, greedy=greedy)


def collector_config(config: GRPOConfig) -> dict[str, Any]:
    return {"grpo": {"num_prompts_per_step": config.prompts_per_step,
                     "num_generations_per_prompt": config.generations_per_prompt, "max_rollout_turns": config.turns,
                     "async_grpo": {"max_trajectory_age_steps": config.max_trajectory_age,
                                    "group_timeout_s": config.sample_timeout_s}},
            "policy": {"max_total_sequence_length": MAX_SEQ_LEN,
                       "generation": {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature}},
            "env": {"should_use_nemo_gym": config.use_nemo_gym}}


def weights_folder(weights_root: Path, version: int) -> Path:
    return weights_root / f"v{version}"


def push_weights(model: PreTrainedModel, policy: VllmHttpGeneration, weights_root: Path, version: int) -> None:
    """Load version `version` into every vLLM replica: the model's tensors themselves over the gloo transport, else
    a folder written for it (only the newest folder is kept on disk)."""
    if policy.weight_transport != "disk":
        policy.update_weights(model, version)
        return
    folder = write_weights(model, weights_folder(weights_root, version))
    policy.update_weights(folder, version)
    for old in weights_root.glob("v*"):
        if old != folder:
            shutil.rmtree(old)


class StepGroups(Protocol):
    """Where a step's prompt groups come from, and what it does around a weight push."""

    def sample(self, step: int) -> tuple[list[PromptGroupRecord], float]:
        """The groups step `step` trains on, and their mean trajectory age."""

    def prepare_for_refit(self) -> None: ...

    def after_push(self, version: int) -> None: ...

    def shutdown(self) -> None: ...


class CollectedGroups:
    """Asynchronous GRPO: the collector generates ahead, on weights at most `max_trajectory_age` versions old."""

    def __init__(self, config: GRPOConfig, policy: VllmHttpGeneration, rollouts: Rollouts,
                 train_datums: list[DatumSpec]) -> None:
        self.config = config
        age = config.max_trajectory_age
        self.buffer = ReplayBuffer(max_size=config.prompts_per_step * (age + 1) * 2)
        self.collector = AsyncTrajectoryCollector(
            policy, rollouts.tokenizer, rollouts.envs, collector_config(config), self.buffer,
            rollout_manager=rollouts.manager(config.generations_per_prompt, False))
        self.collector.start_collection(StatefulPromptLoader(train_datums, batch_size=config.prompts_per_step,
                                                             seed=config.seed))

    def sample(self, step: int) -> tuple[list[PromptGroupRecord], float]:
        sampled = self.buffer.sample_blocking(self.config.prompts_per_step, step, self.config.max_trajectory_age,
                                              timeout_s=self.config.sample_timeout_s)
        return sampled["trajectories"], float(sampled["avg_trajectory_age"])

    def prepare_for_refit(self) -> None:
        self.collector.prepare_for_refit(timeout_s=self.config.sample_timeout_s)

    def after_push(self, version: int) -> None:
        self.collector.set_weight_version(version)
        self.collector.resume_after_refit()

    def shutdown(self) -> None:
        self.collector.shutdown()


class SynchronousGroups:
    """Synchronous GRPO: each step's groups are generated when the step asks, on the weights the previous step
    pushed (age 0), and nothing generates while the trainer trains. A failed group fails the run (the rollout
    manager's own retries are the budget: there is no collector to retry groups)."""

    def __init__(self, config: GRPOConfig, rollouts: Rollouts, train_datums: list[DatumSpec]) -> None:
        self.manager = rollouts.manager(config.generations_per_prompt, False)
        self.batches = self._every_epoch(StatefulPromptLoader(train_datums, batch_size=config.prompts_per_step,
                                                              seed=config.seed, drop_last=True))

    @staticmethod
    def _every_epoch(loader: StatefulPromptLoader) -> Iterator[list[DatumSpec]]:
        while True:
            yield from loader  # each pass is the loader's next epoch (load_datums guarantees a full batch)

    def sample(self, step: int) -> tuple[list[PromptGroupRecord], float]:
        return run_groups(self.manager, next(self.batches)), 0.0

    def prepare_for_refit(self) -> None:
        pass  # nothing is generating

    def after_push(self, version: int) -> None:
        pass

    def shutdown(self) -> None:
        pass


def train(config: GRPOConfig, model: PreTrainedModel, policy: VllmHttpGeneration, rollouts: Rollouts,
          train_datums: list[DatumSpec], log: StepLog, started_at: float, generator_dtype: str) -> list[StepRecord]:
    """`config.steps` steps, fewer when `config.max_wall_s` seconds since `started_at` (perf_counter) run out.
    `generator_dtype` is what the vLLM computes in (it decides the default of the off-policy correction)."""
    corrected = config.corrects_off_policy(generator_dtype)
    cap = config.importance_sampling_cap if corrected else None
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    source: StepGroups = (SynchronousGroups(config, rollouts, train_datums) if config.synchronous
                          else CollectedGroups(config, policy, rollouts, train_datums))
    records = []
    try:
        for step in range(config.steps):
            started = time.perf_counter()
            groups, age = source.sample(step)
            waited = time.perf_counter()
            batch = training_batch(groups, rollouts.tokenizer.pad_token_id)
            metrics = grpo_step(model, optimizer, batch, config.micro_batch_size,
                                truncated_importance_sampling_ratio=cap)
            trained = time.perf_counter()
            source.prepare_for_refit()
            refit_ready = time.perf_counter()
            push_weights(model, policy, config.out_dir / "weights", step + 1)
            source.after_push(step + 1)
            pushed = time.perf_counter()
            record = StepRecord(
                step=step, reward=float(batch.rewards.mean()), token_mult_prob_error=metrics.token_mult_prob_error,
                trajectory_age=age, wait_s=waited - started,
                train_s=trained - waited, refit_wait_s=refit_ready - trained, push_s=pushed - refit_ready,
                loss=metrics.loss, probs_ratio=metrics.probs_ratio, clipped_fraction=metrics.clipped_fraction,
                grad_norm=metrics.grad_norm, generated_tokens=metrics.generated_tokens,
                importance_sampling=corrected, importance_weight_mean=metrics.importance_weight_mean,
                importance_truncated_fraction=metrics.importance_truncated_fraction,
                trainer_dtype=TRAINER_DTYPE, generator_dtype=generator_dtype,
                weight_version=policy.weight_version, ended_at=time.time(), elapsed_s=pushed - started_at)
            log.write(record)
            records.append(record)
            print(f"step {step}: reward {record.reward:.3f}, token_mult_prob_error {record.token_mult_prob_error:.4f},"
                  f" age {record.trajectory_age:.2f}, importance weight {record.importance_weight_mean:.3f}"
                  f"{' (on)' if corrected else ' (off)'}, wait {record.wait_s:.1f}s, train {record.train_s:.1f}s, "
                  f"push {record.push_s:.1f}s", flush=True)
            if config.max_wall_s is not None and record.elapsed_s >= config.max_wall_s:
                break
    finally:
        source.shutdown()
    return records


@dataclass
class _Running:
    policy: VllmHttpGeneration
    envs: dict[str, Any]
    head_url: Optional[str]
    generator_dtype: str  # what the vLLM computes in, as it reports it


@contextmanager
def _running(config: GRPOConfig, tokenizer: Any) -> Iterator[_Running]:
    """vLLM, the environments and (agent path) the ng_run stack, for as long as the run lasts."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    generation = {"model_name": SERVED_NAME, "max_seq_len": MAX_SEQ_LEN, "pad_token_id": tokenizer.pad_token_id,
                  "max_new_tokens": config.max_new_tokens, "temperature": config.temperature}
    with vllm_server(config.model, config.out_dir / "vllm.log", config.generator_dtype, config.vllm_url,
                     every_core=config.synchronous) as url, \
            VllmHttpGeneration(generation, url, weight_transport=config.weight_transport) as policy, \
            MathEnvironment(verify_timeout_s=VERIFY_TIMEOUT_S) as math_env:
        envs = {"math": math_env, "number_guess": NumberGuessEnvironment()}
        generator_dtype = served_dtype(url)
        notice = dtype_notice(generator_dtype, config.corrects_off_policy(generator_dtype))
        if notice:
            print(notice, flush=True)
        if not config.use_nemo_gym:
            yield _Running(policy, envs, None, generator_dtype)
            return
        stack_dir = config.out_dir / "stack"
        stack_dir.mkdir(exist_ok=True)
        with agent_stack(config.task, url, stack_dir) as head_url:
            yield _Running(policy, envs, head_url, generator_dtype)


def run(config: GRPOConfig) -> RunResult:
    """The whole run: servers up, evaluate, train `steps` steps, evaluate, servers down."""
    started_at = time.perf_counter()
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    train_datums, eval_datums = load_datums(config, tokenizer)
    model = trainable_model(config.model)
    wandb = wandb_run("nemo-gym-grpo", config.out_dir, _plain(asdict(config))) if config.wandb else None
    try:
        with _running(config, tokenizer) as running:
            # Version 0 is the trainer's starting weights, whatever the vLLM served before (e.g. an earlier run's).
            shutil.rmtree(config.out_dir / "weights", ignore_errors=True)
            push_weights(model, running.policy, config.out_dir / "weights", 0)
            rollouts = Rollouts(config, tokenizer, running.policy, running.envs, running.head_url)
            greedy, sampled = rollouts.manager(1, greedy=True), rollouts.manager(config.eval_samples, greedy=False)
            result = RunResult(float("nan"), float("nan"))
            if config.evaluate:
                result.eval_before, result.eval_sampled_before = (mean_reward(greedy, eval_datums),
                                                                  mean_reward(sampled, eval_datums))
                print(f"held-out reward before: greedy {result.eval_before:.3f}, "
                      f"sampled {result.eval_sampled_before:.3f}", flush=True)
            log = StepLog(config.out_dir / "steps.csv", wandb)
            result.records = train(config, model, running.policy, rollouts, train_datums, log, started_at,
                                   running.generator_dtype)
            result.generator_dtype = running.generator_dtype
            result.weights = weights_folder(config.out_dir / "weights", len(result.records))
            if config.weight_transport != "disk":  # the pushes wrote no folder: the trained weights, once
                result.weights = write_weights(model, result.weights)
            if config.evaluate:
                result.eval_after = mean_reward(greedy, eval_datums)
                result.eval_sampled_after = mean_reward(sampled, eval_datums)
                print(f"held-out reward after: greedy {result.eval_after:.3f}, "
                      f"sampled {result.eval_sampled_after:.3f}", flush=True)
            log.summary({"eval/greedy_reward_before": result.eval_before, "eval/greedy_reward_after": result.eval_after,
                         "eval/sampled_reward_before": result.eval_sampled_before,
                         "eval/sampled_reward_after": result.eval_sampled_after})
    finally:
        if wandb is not None:
            wandb.finish()
    (config.out_dir / "summary.json").write_text(json.dumps(
        {"config": _plain(asdict(config)), "trainer_dtype": TRAINER_DTYPE, "generator_dtype": result.generator_dtype,
         "importance_sampling": config.corrects_off_policy(result.generator_dtype),
         "eval_before": result.eval_before, "eval_after": result.eval_after,
         "eval_sampled_before": result.eval_sampled_before, "eval_sampled_after": result.eval_sampled_after,
         "steps": [asdict(r) for r in result.records]}, indent=2) + "\n")
    return result


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


def parse_args(argv: Optional[list[str]] = None) -> GRPOConfig:
    defaults = GRPOConfig()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(DEFAULT_ROWS), default=defaults.task)
    parser.add_argument("--agents", action="store_true", help="roll out through the agent servers (use_nemo_gym)")
    parser.add_argument("--rows", type=Path, help="NeMo Gym JSONL rows (default: the task's shipped example)")
    parser.add_argument("--eval-rows", type=int, default=defaults.eval_rows)
    parser.add_argument("--eval-samples", type=int, default=defaults.eval_samples)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--prompts-per-step", type=int, default=defaults.prompts_per_step)
    parser.add_argument("--generations", type=int, default=defaults.generations_per_prompt)
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
    parser.add_argument("--max-turns", type=int, help="default: 1 for math, 8 for number_guess")
    parser.add_argument("--temperature", type=float, default=defaults.temperature)
    parser.add_argument("--lr", type=float, default=defaults.learning_rate)
    parser.add_argument("--max-age", type=int, default=defaults.max_trajectory_age,
                        help="max trajectory age in steps (asynchronous GRPO)")
    parser.add_argument("--synchronous", action="store_true",
                        help="no collector: generate each step's groups after the previous push, then train")
    parser.add_argument("--generator-dtype", choices=["float32", "bfloat16"], default=defaults.generator_dtype,
                        help="the dtype of the vLLM this run starts (float32: exact agreement with the trainer)")
    parser.add_argument("--importance-sampling", choices=["on", "off"],
                        help="truncated importance sampling (default: on when --max-age >= 1 without "
                             "--synchronous, or with a bfloat16 generator)")
    parser.add_argument("--importance-sampling-cap", type=float, default=defaults.importance_sampling_cap,
                        help="the most a token's importance weight can be "
                             "(NeMo RL's truncated_importance_sampling_ratio)")
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--model", type=Path, default=defaults.model)
    parser.add_argument("--vllm-url", help="a vLLM serving --model with VLLM_SERVER_DEV_MODE=1 (default: start one)")
    parser.add_argument("--weight-transport", choices=["disk", "gloo"], default=defaults.weight_transport,
                        help="push weights through a folder, or as tensors over gloo (a --vllm-url must then run "
                             "with --weight-transfer-config '{\"backend\": \"nemo_gym_gloo\"}')")
    parser.add_argument("--out", type=Path, default=defaults.out_dir)
    parser.add_argument("--no-wandb", action="store_true")
    parser.add_argument("--max-wall-s", type=float, help="stop training once the run has lasted this long (seconds)")
    args = parser.parse_args(argv)
    return GRPOConfig(task=args.task, use_nemo_gym=args.agents, rows=args.rows, eval_rows=args.eval_rows,
                      eval_samples=args.eval_samples,
                      steps=args.steps, prompts_per_step=args.prompts_per_step,
                      generations_per_prompt=args.generations, max_new_tokens=args.max_new_tokens,
                      max_turns=args.max_turns, temperature=args.temperature, learning_rate=args.lr,
                      max_trajectory_age=args.max_age, synchronous=args.synchronous,
                      generator_dtype=args.generator_dtype,
                      importance_sampling=(None if args.importance_sampling is None
                                           else args.importance_sampling == "on"),
                      importance_sampling_cap=args.importance_sampling_cap,
                      micro_batch_size=args.micro_batch_size, weight_transport=args.weight_transport, seed=args.seed,
                      model=args.model, vllm_url=args.vllm_url, out_dir=args.out, wandb=not args.no_wandb,
                      max_wall_s=args.max_wall_s)


if __name__ == "__main__":  # required: MathEnvironment's verifier processes re-import this module
    # SIGTERM unwinds like Ctrl-C, so the vLLM, the ng_run stack and the verifier processes this run started stop.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    result = run(parse_args())
    print(f"held-out reward: greedy {result.eval_before:.3f} -> {result.eval_after:.3f}, "
          f"sampled {result.eval_sampled_before:.3f} -> {result.eval_sampled_after:.3f}")
