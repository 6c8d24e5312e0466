"""A scripted policy and environment for exact, fast tests of the rollout loops (the real vLLM tests prove the same
paths with a real model; these pin the metric values, which a real model's choices would make unpredictable)."""

import asyncio
from typing import Any, AsyncIterator, Callable, Optional

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_gym.experience.generation.interfaces import GenerationInterface

PAD = 2
LOGPROB = -0.5


class ScriptedGeneration(GenerationInterface):
    """Answers every prompt with `reply(prompt_ids)` (token ids), cut to the sample's max_new_tokens."""

    supports_async = True

    def __init__(self, reply: Callable[[list[int]], list[int]], delay_s: float = 0.0,
                 fail_when: Optional[Callable[[list[int]], bool]] = None) -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.fail_when = fail_when
        self.calls = 0
        self.started = 0
        self.finished = 0

    @property
    def pad_token_id(self) -> int:
        return PAD

    def _one(self, data: BatchedDataDict, i: int) -> BatchedDataDict:
        length = int(data["input_lengths"][i])
        prompt = data["input_ids"][i, :length].tolist()
        if self.fail_when and self.fail_when(prompt):
            raise RuntimeError("scripted generation failure")
        generated = list(self.reply(prompt))
        room = int(data["max_new_tokens"][i]) if "max_new_tokens" in data else len(generated)
        truncated = len(generated) > room
        generated = generated[:room]
        ids = torch.tensor([prompt + generated], dtype=torch.long)
        logprobs = torch.tensor([[0.0] * length + [LOGPROB] * len(generated)])
        return BatchedDataDict(output_ids=ids, logprobs=logprobs,
                               generation_lengths=torch.tensor([len(generated)]),
                               unpadded_sequence_lengths=torch.tensor([length + len(generated)]),
                               truncated=torch.tensor([truncated]))

    def generate(self, data: BatchedDataDict, greedy: bool = False) -> BatchedDataDict:
        self.calls += 1
        outs = [self._one(data, i) for i in range(data.size)]
        return BatchedDataDict.from_batches(outs, pad_value_dict={"output_ids": PAD, "logprobs": 0.0})

    async def generate_async(self, data: BatchedDataDict, greedy: bool = False
                             ) -> AsyncIterator[tuple[int, BatchedDataDict]]:
        self.calls += 1
        for i in range(data.size):
            self.started += 1
            await asyncio.sleep(self.delay_s)
            out = self._one(data, i)
            self.finished += 1
            yield i, out


class CountdownEnvironment(EnvironmentInterface):
    """Ends a sample after `extra_env_info["turns"]` turns; 0.25 reward per turn; counts turns in its metadata."""

    def __init__(self, role: str = "user", fail_on_turn: Optional[int] = None,
                 next_stop_strings: Optional[list[str]] = None) -> None:
        self.role = role
        self.fail_on_turn = fail_on_turn
        self.next_stop_strings = next_stop_strings

    def step(self, message_log_batch: list, metadata: list) -> EnvironmentReturn:
        observations, new_metadata, terminateds = [], [], []
        for log, state in zip(message_log_batch, metadata):
            assert all(set(m) == {"role", "content"} for m in log), "environments must not see token ids"
            seen = state.get("seen", 0) + 1
            if self.fail_on_turn == seen:
                raise ValueError("scripted environment failure")
            observations.append({"role": self.role, "content": f"turn {seen} done"})
            new_metadata.append({**state, "seen": seen})
            terminateds.append(seen >= state["turns"])
        n = len(message_log_batch)
        return EnvironmentReturn(observations, new_metadata, [self.next_stop_strings] * n, torch.full((n,), 0.25),
                                 torch.tensor(terminateds))


def countdown_samples(template: Any, turns: list[int], task_name: str = "countdown") -> BatchedDataDict:
    logs = [template.prompt_message_log([{"role": "user", "content": f"Count down from {n}."}]) for n in turns]
    return BatchedDataDict(message_log=logs, extra_env_info=[{"turns": n} for n in turns],
                           task_name=[task_name] * len(turns), idx=list(range(len(turns))))
