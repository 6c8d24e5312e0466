"""Token ids for chat messages, rendered with the tokenizer's own chat template.

Prompts are split into per-message token ids whose concatenation is exactly the rendered prompt. Observations that
follow a generation are rendered as the template would render them after that assistant turn, then spliced onto
the exact generated tokens (nemo_gym.chat_tokens), so no earlier token is ever re-tokenized.
"""

from functools import cached_property
from typing import Any, Mapping, Sequence

import torch

from nemo_gym.chat_tokens import TemplateSpliceError, closing_from_probes, continuation_tokens, probe_conversations
from nemo_gym.experience.errors import ChatTemplateError
from nemo_gym.experience.interfaces import LLMMessageLogType

# Observation roles the chat template knows; any other role (NeMo RL's "environment") is raw text the environment
# formatted itself, tokenized as it is.
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _chat_view(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class ChatTemplate:
    """Renders messages to token ids with `tokenizer`'s chat template (any Hugging Face tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with no special tokens added (special-token strings in it still map to their ids)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: Sequence[int] | torch.Tensor) -> str:
        ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            _chat_view(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return self.encode(text)

    @cached_property
    def assistant_closing(self) -> list[int]:
        """The tokens the template puts after an assistant turn's content."""
        probe_a, probe_b = probe_conversations()
        try:
            return closing_from_probes(self.render(probe_a, False), self.render(probe_b, False))
        except TemplateSpliceError as exc:
            raise ChatTemplateError(f"{type(self.tokenizer).__name__}: {exc}") from None

    def prompt_message_log(self, messages: Sequence[dict[str, Any]]) -> LLMMessageLogType:
        """`messages` with `token_ids` whose concatenation is the rendered prompt (with the generation prompt).

        Each message gets the tokens its rendering adds; where the template is not append-only at a message
        boundary, the remainder goes to the last message, so the concatenation is always exact.
        """
        full = self.render(messages, add_generation_prompt=True)
        log: LLMMessageLogType = []
        start = 0
        for i, message in enumerate(messages):
            end = len(full)
            if i < len(messages) - 1:
                partial = self.render(messages[: i + 1], add_generation_prompt=False)
                end = len(partial) if full[: len(partial)] == partial and len(partial) >= start else start
            log.append({"role": message["role"], "content": message["content"],
                        "token_ids": torch.tensor(full[start:end], dtype=torch.long)})
            start = end
        return log

    def observation_ids(self, history: Sequence[Mapping[str, Any]], observation: dict[str, str]) -> list[int]:
        """Tokens of `observation` following `history`, whose last message is an assistant turn with the exact
        `token_ids` the model generated: the template's closing of that turn plus the new turn and the next
        generation prompt. A non-chat role is tokenized raw, as NeMo RL environments format it themselves."""
        if observation["role"] not in CHAT_ROLES:
            return self.encode(observation["content"])
        return self.messages_ids(history, [observation])

    def messages_ids(self, history: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """`observation_ids` of several chat messages at once (say, the outputs of two tool calls)."""
        generated = history[-1]["token_ids"]
        generated = generated.tolist() if isinstance(generated, torch.Tensor) else list(generated)
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *messages], add_generation_prompt=True)
        try:
            return continuation_tokens(before, after, generated, self.assistant_closing)
        except TemplateSpliceError as exc:
            raise ChatTemplateError(f"{type(self.tokenizer).__name__}: {exc}") from None
