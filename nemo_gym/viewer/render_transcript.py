"""A transcript as HTML: each message, reasoning block, tool call (name, arguments) and tool result in order,
then the verifier's fields and the token counts. Long texts are folded."""

from typing import Any

from nemo_gym.safe_html import Child, Html, el, join
from nemo_gym.viewer.render_common import fold, kv_table
from nemo_gym.viewer.transcript import Item, Transcript


def _item_html(item: Item) -> Html:
    part = [" ", el("span", "(request)", class_="part")] if item.part == "prompt" else None
    if item.kind == "tool_call":
        label = ["tool call ", el("code", item.name, class_="tool-name"), " ", el("span", item.call_id, class_="muted")]
        return _item("item tool-call", [label, part], fold(item.text, "arguments"))
    if item.kind == "tool_result":
        name = [" of ", el("code", item.name)] if item.name else None
        return _item("item tool-result", ["tool result", name, " ", el("span", item.call_id, class_="muted"), part],
                     fold(item.text))
    if item.kind == "reasoning":
        return _item("item reasoning", ["reasoning", part], fold(item.text))
    if item.kind == "message":
        return _item(f"item message role-{item.role}", [item.role, part], fold(item.text))
    return _item("item other", ["other item", part], fold(item.text))


def _item(css: str, label: Child, body: Html) -> Html:
    return el("div", el("div", label, class_="label"), body, class_=css)


def transcript_html(t: Transcript, heading: Child) -> Html:
    fields_title = "Failure" if t.failed else "Verifier fields"
    usage = el("div", el("h4", "Tokens"), kv_table(t.usage, ("usage", "tokens"))) if t.usage else None
    return el("article", el("h3", heading), [el("p", n, class_="note") for n in t.notes],
              el("div", el("div", el("h4", fields_title), kv_table(t.fields)), usage, class_="tables"),
              el("h4", f"Transcript ({len(t.items)} items)"),
              el("div", [_item_html(item) for item in t.items], class_="items"), class_="transcript")


def rollout_nav(links: dict[str, Any]) -> Html:
    parts = [el("a", label, rel=rel, href=href) for rel, href, label in (
        ("prev", links.get("prev"), "← previous rollout"), ("up", links.get("task"), "all rollouts of this task"),
        ("next", links.get("next"), "next rollout →")) if href]
    return el("div", join(" ", parts), class_="pager")
