"""A transcript as HTML: each message, reasoning block, tool call (name, arguments) and tool result in order,
then the verifier's fields and the token counts. Long texts are folded."""

from typing import Any

from nemo_gym.viewer.render_common import esc, fold, kv_table
from nemo_gym.viewer.transcript import Item, Transcript


def _item_html(item: Item) -> str:
    part = ' <span class="part">(request)</span>' if item.part == "prompt" else ""
    if item.kind == "tool_call":
        return (f'<div class="item tool-call"><div class="label">tool call <code class="tool-name">'
                f'{esc(item.name)}</code> <span class="muted">{esc(item.call_id)}</span>{part}</div>'
                f'{fold(item.text, "arguments")}</div>')
    if item.kind == "tool_result":
        name = f' of <code>{esc(item.name)}</code>' if item.name else ""
        return (f'<div class="item tool-result"><div class="label">tool result{name} <span class="muted">'
                f"{esc(item.call_id)}</span>{part}</div>{fold(item.text)}</div>")
    if item.kind == "reasoning":
        return f'<div class="item reasoning"><div class="label">reasoning{part}</div>{fold(item.text)}</div>'
    if item.kind == "message":
        return (f'<div class="item message role-{esc(item.role)}"><div class="label">{esc(item.role)}{part}</div>'
                f"{fold(item.text)}</div>")
    return f'<div class="item other"><div class="label">other item{part}</div>{fold(item.text)}</div>'


def transcript_html(t: Transcript, heading: str) -> str:
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in t.notes)
    fields_title = "Failure" if t.failed else "Verifier fields"
    usage = f"<div><h4>Tokens</h4>{kv_table(t.usage, ('usage', 'tokens'))}</div>" if t.usage else ""
    items = "".join(_item_html(item) for item in t.items)
    return (f'<article class="transcript"><h3>{heading}</h3>{notes}<div class="tables"><div><h4>{fields_title}</h4>'
            f'{kv_table(t.fields)}</div>{usage}</div><h4>Transcript ({len(t.items)} items)</h4>'
            f'<div class="items">{items}</div></article>')


def rollout_nav(links: dict[str, Any]) -> str:
    parts = [f'<a rel="{rel}" href="{esc(href)}">{label}</a>' for rel, href, label in (
        ("prev", links.get("prev"), "← previous rollout"), ("up", links.get("task"), "all rollouts of this task"),
        ("next", links.get("next"), "next rollout →")) if href]
    return f'<div class="pager">{" ".join(parts)}</div>'
