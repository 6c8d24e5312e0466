"""Continuing a conversation token-exactly after a generation, for any append-only chat template.

A chat template renders the history from text, and text does not always tokenize back to the tokens the model
generated (a model may emit a non-canonical split, or stop on a stop string before its end-of-turn token). Training
needs the exact tokens, so the next prompt is the exact tokens so far plus only what the template adds:

    exact so far:    [prompt ... generated]            (generated may or may not end with the end-of-turn token)
    rendered before: template(history through that assistant turn, no generation prompt)
    rendered after:  template(history + new messages, with the generation prompt)
    closing:         the tokens the template puts after an assistant turn's content (e.g. `<|im_end|>` `\\n`)

Next prompt = exact so far + the part of `closing` the generation did not already produce
+ rendered after[len(rendered before):].

`closing` is found by rendering two probe conversations that differ only in the assistant's content and taking
their common tail, so it works without knowing the model's end-of-turn ids (a model server only has the template).
"""

from typing import Any, Sequence


class TemplateSpliceError(ValueError):
    """The template is not append-only here, or its assistant turns have no recognisable closing."""


def probe_conversations() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two conversations to render without a generation prompt; they differ only in the assistant's content."""
    return tuple(  # type: ignore[return-value]
        [{"role": "user", "content": "1"}, {"role": "assistant", "content": content}] for content in ("a", "b")
    )


def closing_from_probes(rendered_a: Sequence[int], rendered_b: Sequence[int]) -> list[int]:
    """The common tail of the two rendered probe conversations: how the template closes an assistant turn."""
    n = 0
    while n < min(len(rendered_a), len(rendered_b)) and rendered_a[-1 - n] == rendered_b[-1 - n]:
        n += 1
    if n == 0:
        raise TemplateSpliceError("the chat template puts nothing after an assistant turn's content")
    return list(rendered_a[len(rendered_a) - n :])


def continuation_tokens(rendered_before: Sequence[int], rendered_after: Sequence[int], generated: Sequence[int],
                        closing: Sequence[int]) -> list[int]:
    """The tokens that follow `generated` up to the next generation prompt (see the module docstring)."""
    before, after, closing = list(rendered_before), list(rendered_after), list(closing)
    if after[: len(before)] != before:
        raise TemplateSpliceError(
            "the chat template renders the earlier turns differently once new messages follow them "
            "(not append-only), so the conversation cannot be continued token-exactly")
    if before[len(before) - len(closing) :] != closing:
        raise TemplateSpliceError("the rendered history does not end with the template's closing of an assistant turn")
    generated = list(generated)
    overlap = next((k for k in range(min(len(closing), len(generated)), 0, -1) if generated[-k:] == closing[:k]), 0)
    return closing[overlap:] + after[len(before) :]
