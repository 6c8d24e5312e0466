"""The commands docs/trainers.md and the example's own docstring show are ones the example trainer accepts."""

import re
import shlex

import pytest
from transformers import AutoTokenizer

from examples.grpo import train
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT

COMMAND = re.compile(r"python -m examples\.grpo\.train[^\n`#]*")


def _shown() -> list[str]:
    pages = [(REPO_ROOT / "docs" / "trainers.md").read_text(), train.__doc__ or ""]
    return [match.group(0).strip() for page in pages for match in COMMAND.finditer(page)]


def test_the_documented_commands_parse() -> None:
    commands = _shown()
    assert len(commands) >= 4, commands
    for command in commands:
        args = [a for a in shlex.split(command)[3:] if a != "..."]
        config = train.parse_args(args)
        assert config.task in ("math", "number_guess")


def test_the_flags_reach_the_config() -> None:
    config = train.parse_args(["--task", "number_guess", "--agents", "--steps", "3", "--generations", "6",
                               "--max-age", "2", "--lr", "1e-5", "--eval-rows", "5", "--no-wandb", "--synchronous"])
    assert (config.task, config.use_nemo_gym, config.steps, config.generations_per_prompt,
            config.max_trajectory_age, config.learning_rate, config.eval_rows, config.wandb, config.synchronous) == (
        "number_guess", True, 3, 6, 2, 1e-5, 5, False, True)
    assert config.turns == 8 and train.parse_args([]).turns == 1 and not train.parse_args([]).synchronous


@pytest.mark.parametrize("eval_rows", [0, 48])
def test_a_split_without_held_out_rows_or_a_step_to_train_is_refused(eval_rows: int) -> None:
    config = train.GRPOConfig(eval_rows=eval_rows, prompts_per_step=4)  # the shipped example has 50 rows
    with pytest.raises(ValueError, match="need at least 1 held out and 4"):
        train.load_datums(config, AutoTokenizer.from_pretrained(MODEL_DIR))


def test_the_generator_computes_in_the_trainers_dtype_unless_asked() -> None:
    assert train.parse_args([]).generator_dtype == train.TRAINER_DTYPE == "float32"
    assert train.parse_args(["--generator-dtype", "bfloat16"]).generator_dtype == "bfloat16"
    assert train.dtype_notice("float32", corrected=True) is None
    said = train.dtype_notice("bfloat16", corrected=True)
    assert said is not None and "bfloat16" in said and "importance sampling corrects" in said
    assert "OFF" in (train.dtype_notice("bfloat16", corrected=False) or "")


@pytest.mark.parametrize(("args", "generator_dtype", "corrected"), [
    ([], "float32", True),  # asynchronous, max age 1: batches can be a version old
    (["--max-age", "0"], "float32", False),
    (["--synchronous"], "float32", False),
    (["--synchronous"], "bfloat16", True),  # the generator rounds differently
    (["--synchronous", "--importance-sampling", "on"], "float32", True),
    (["--importance-sampling", "off"], "bfloat16", False),
])
def test_the_off_policy_correction_is_on_where_the_generator_can_disagree(args: list[str], generator_dtype: str,
                                                                          corrected: bool) -> None:
    assert train.parse_args(args).corrects_off_policy(generator_dtype) is corrected
