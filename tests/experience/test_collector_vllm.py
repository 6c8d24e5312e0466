"""The trajectory collector on the real vLLM with the real RolloutManager, natively and through the agent servers:
groups arrive for every step at the right age, and shutdown leaves no thread or process behind."""

import threading
import time
from pathlib import Path
from typing import Any, Iterator

import orjson
import psutil
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.helpers.model import MODEL_DIR
from tests.experience.collector_fakes import train_step, wait_for
from tests.helpers.stack import REPO_ROOT, environment_config, running_stack

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
ROWS = [orjson.loads(line) for line in
        (REPO_ROOT / "nemo_gym/resources_servers/math/data/arithmetic_example.jsonl").read_bytes().splitlines()[:12]]
PROMPTS, GENERATIONS, MAX_AGE, VERSIONS = 2, 2, 1, 4
GENERATION = {"max_new_tokens": 24, "temperature": 1.0}


def _config(use_nemo_gym: bool) -> dict[str, Any]:
    return {"grpo": {"num_prompts_per_step": PROMPTS, "num_generations_per_prompt": GENERATIONS,
                     "max_rollout_turns": 1, "async_grpo": {"max_trajectory_age_steps": MAX_AGE}},
            "policy": {"max_total_sequence_length": 2048, "generation": GENERATION},
            "env": {"should_use_nemo_gym": use_nemo_gym}}


def _datums(task_name: str) -> list[dict]:
    template = ChatTemplate(TOKENIZER)
    return [datum_from_row(row, template, task_name, i) for i, row in enumerate(ROWS)]


def _drive(collector: AsyncTrajectoryCollector, buffer: ReplayBuffer, datums: list) -> list:
    """Train VERSIONS steps (train_step checks each group's target and age) and return the records trained."""
    records = []
    collector.start_collection(StatefulPromptLoader(datums, batch_size=PROMPTS, seed=0))
    try:
        for step in range(VERSIONS):
            keys = train_step(collector, buffer, step, PROMPTS, MAX_AGE, timeout_s=300)
            records.append(keys)
        metrics = collector.get_metrics()
    finally:
        collector.shutdown()
    assert metrics["groups_sampled"] == PROMPTS * VERSIONS and metrics["groups_failed"] == 0
    assert metrics["generation_time_s_mean"] > 0
    return [key for step in records for key in step]


def _children() -> set[psutil.Process]:
    """Child processes, except Python's own multiprocessing resource tracker: the interpreter starts it once, on the
    first spawned pool, and it exits with the interpreter."""
    children = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.resource_tracker" not in " ".join(process.cmdline()):
                children.add(process)
        except psutil.NoSuchProcess:
            continue
    return children


@pytest.fixture
def nothing_left_behind() -> Iterator[None]:
    threads, children = set(threading.enumerate()), _children()
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        extra_threads = set(threading.enumerate()) - threads
        extra_children = _children() - children
        if not extra_threads and not extra_children:
            return
        time.sleep(0.2)
    assert not extra_threads and not extra_children, (extra_threads, extra_children)


def test_native_rollouts_through_the_collector(vllm_server, nothing_left_behind) -> None:
    config = {"model_name": vllm_server.model, "max_seq_len": 2048, "pad_token_id": TOKENIZER.pad_token_id,
              **GENERATION}
    with VllmHttpGeneration(config, vllm_server.base_url) as backend, MathEnvironment() as env:
        buffer = ReplayBuffer(PROMPTS * (MAX_AGE + 1) * 2)
        collector = AsyncTrajectoryCollector(backend, TOKENIZER, {"math": env}, _config(False), buffer)
        trained = _drive(collector, buffer, _datums("math"))
    assert len(set(trained)) == PROMPTS * VERSIONS


def test_agent_rollouts_through_the_collector(vllm_server, tmp_path: Path) -> None:
    configs = f"{environment_config('math')},{REPO_ROOT}/configs/vllm_model.yaml"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path) as stack:
        threads, children = set(threading.enumerate()), _children()
        manager = RolloutManager(TOKENIZER, {}, GENERATIONS, 2048, generation_config=GENERATION, use_nemo_gym=True,
                                 head_server_url=stack.head_url, agent_name="math_simple_agent")
        buffer = ReplayBuffer(PROMPTS * (MAX_AGE + 1) * 2)
        collector = AsyncTrajectoryCollector(None, TOKENIZER, {}, _config(True), buffer, rollout_manager=manager)
        trained = _drive(collector, buffer, _datums("math"))
        assert len(set(trained)) == PROMPTS * VERSIONS
        assert wait_for(lambda: not set(threading.enumerate()) - threads and not _children() - children, 10), \
            (set(threading.enumerate()) - threads, _children() - children)
