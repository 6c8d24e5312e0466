"""The collector on the real RolloutManager (built lazily from the master config) with the real tokenizer and chat
template; only the policy and the environment are scripted, so rewards are exact."""

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.collector.checkpoint import read_checkpoint
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.errors import DataExhaustedError
from nemo_gym.experience.interfaces import PromptGroupRecord
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.helpers.model import MODEL_DIR
from tests.experience.collector_fakes import master_config, no_thread_leak
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration, countdown_samples

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_collector_drives_the_real_rollout_manager_over_columnar_batches(tmp_path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    template = ChatTemplate(tokenizer)
    answer = template.encode("OK") + [tokenizer.eos_token_id]
    prompts = countdown_samples(template, [1, 2, 1, 2, 1, 2, 1, 2])
    loader = [prompts.slice(0, 4), prompts.slice(4, 8)]  # columnar BatchedDataDict batches
    buffer = ReplayBuffer(8)
    collector = AsyncTrajectoryCollector(ScriptedGeneration(lambda ids: answer, delay_s=0.001), tokenizer,
                                         {"countdown": CountdownEnvironment()}, master_config(2, 1, max_epochs=1),
                                         buffer)
    try:
        collector.start_collection(loader)
        records = []
        for step in range(4):
            records += buffer.sample_blocking(2, step, 1, timeout_s=30)["trajectories"]
            collector.prepare_for_refit(timeout_s=30)
            collector.set_weight_version(step + 1)
            collector.resume_after_refit()
            collector.save_checkpoint(tmp_path / "collector.pt")  # real records (token tensors) round-trip
            saved = read_checkpoint(tmp_path / "collector.pt")
            assert all(isinstance(e.trajectory, PromptGroupRecord) for e in saved["buffer"]["entries"])
        with pytest.raises(DataExhaustedError):
            buffer.sample_blocking(2, 4, 1, timeout_s=30)
    finally:
        collector.shutdown()
    assert all(isinstance(r, PromptGroupRecord) and len(r.completions) == 2 for r in records)
    assert sorted(r.prompt_idx for r in records) == list(range(8))
    for record in records:
        assert record.rewards == [0.25 * record.extra_env_info["turns"]] * 2
