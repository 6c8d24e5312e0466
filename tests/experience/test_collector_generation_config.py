"""The collector's `policy.generation` reaches the native rollouts it builds: its max_new_tokens caps every turn of
every trained completion, and a setting the trainer's backend would not apply stops the collector at construction."""

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.collector_fakes import master_config, no_thread_leak
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration, countdown_samples
from tests.helpers.model import MODEL_DIR

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]
TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
CAP = 3


def test_policy_generation_caps_every_native_turn() -> None:
    template = ChatTemplate(TOKENIZER)
    reply = template.encode("a reply far longer than the cap allows")
    config = master_config(2, 1, max_epochs=1)
    config["policy"]["generation"] = {"max_new_tokens": CAP}
    buffer = ReplayBuffer(8)
    collector = AsyncTrajectoryCollector(ScriptedGeneration(lambda ids: reply), TOKENIZER,
                                         {"countdown": CountdownEnvironment()}, config, buffer)
    try:
        collector.start_collection([countdown_samples(template, [2, 1])])
        batch = buffer.sample_blocking(2, 0, 1, timeout_s=30)
    finally:
        collector.shutdown()
    completions = [c for group in batch["trajectories"] for c in group.completions]
    assert len(completions) == 4
    for completion in completions:
        turns = [m["token_ids"].tolist() for m in completion.message_log if m["role"] == "assistant"]
        assert turns and all(turn == reply[:CAP] for turn in turns) and completion.truncated


def test_a_setting_the_backend_would_not_apply_stops_the_collector() -> None:
    config = master_config(2, 1)
    config["policy"]["generation"] = {"max_new_tokens": 16, "temperature": 0.5}
    backend_config = {"model_name": "m", "max_seq_len": 512, "pad_token_id": 2, "max_new_tokens": 16,
                      "temperature": 1.0}
    with VllmHttpGeneration(backend_config, "http://127.0.0.1:9/v1") as backend, \
            pytest.raises(ValueError, match="temperature: 0.5 vs 1.0"):
        AsyncTrajectoryCollector(backend, TOKENIZER, {"countdown": CountdownEnvironment()}, config, ReplayBuffer(8))
