"""Per-step records of the example trainer: one CSV row each, and the same numbers to W&B (offline by default)."""

import csv
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class StepRecord:
    step: int  # the weight version trained on; the step pushes version step + 1
    reward: float  # mean reward of the step's completions
    token_mult_prob_error: float  # NeMo RL's train/generation agreement over the step's generated tokens
    trajectory_age: float  # mean weight versions between generation and this step
    wait_s: float  # waiting for the step's prompt groups
    train_s: float  # forward, backward and optimizer step
    refit_wait_s: float  # waiting for running generations to finish before the weights change
    push_s: float  # writing the weights and loading them into vLLM
    loss: float
    probs_ratio: float
    clipped_fraction: float
    grad_norm: float
    generated_tokens: int
    importance_sampling: bool  # whether the step weighted its tokens by truncated importance sampling
    importance_weight_mean: float  # mean p_trainer / p_generation over the tokens trained on (capped when on)
    importance_truncated_fraction: float  # share of those tokens whose weight hit the cap (0 when off)
    trainer_dtype: str
    generator_dtype: str  # what the vLLM computed in
    weight_version: int  # what vLLM serves after the push
    ended_at: float  # Unix time at the end of the step: lines the steps up with what other processes saw
    elapsed_s: float  # seconds since the run started (servers and evaluation included), at the end of the step


COLUMNS = [f.name for f in fields(StepRecord)]


class StepLog:
    """Appends StepRecords to `csv_path` (header first) and logs them to W&B when a run is given."""

    def __init__(self, csv_path: Path, wandb_run: Optional[Any] = None) -> None:
        self.csv_path = csv_path
        self.wandb_run = wandb_run
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as handle:
            csv.writer(handle).writerow(COLUMNS)

    def write(self, record: StepRecord) -> None:
        with open(self.csv_path, "a", newline="") as handle:
            csv.writer(handle).writerow([getattr(record, name) for name in COLUMNS])
        if self.wandb_run is not None:
            self.wandb_run.log({f"train/{k}": v for k, v in asdict(record).items()
                                if k != "step" and not isinstance(v, str)}, step=record.step)

    def summary(self, values: dict[str, float]) -> None:
        if self.wandb_run is not None:
            self.wandb_run.summary.update(values)


def wandb_run(project: str, directory: Path, config: dict[str, Any]) -> Any:
    """A W&B run; offline unless WANDB_MODE says otherwise (the runs land under `directory`/wandb)."""
    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")
    directory.mkdir(parents=True, exist_ok=True)
    return wandb.init(project=project, dir=str(directory), config=config)
