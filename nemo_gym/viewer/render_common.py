"""Building blocks shared by every view and by the export: numbers, folded long texts, key-value tables and the
page layout, all made with nemo_gym.safe_html (text is escaped wherever it goes). Pages are rendered on the server;
the browser gets plain HTML (plus viewer.js for conveniences), and the export reuses the same functions with the
assets inlined."""

import math
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import orjson

from nemo_gym.safe_html import Child, Html, document, el, fragment, join, table, trusted

FOLD_CHARS = 1200
FOLD_LINES = 24
FOLD_HEAD_CHARS = 400


def fmt(value: Any) -> str:
    """A metric or count for display: 4 significant digits, n/a for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


def fold(text: str, css: str | None = None) -> Html:
    """`text` in a <pre>; a long one shows its head and unfolds to the whole on a click."""
    lines = text.count("\n") + 1
    if len(text) <= FOLD_CHARS and lines <= FOLD_LINES:
        return el("pre", text, class_=css)
    head = "\n".join(text[:FOLD_HEAD_CHARS].split("\n")[:8])
    more = el("span", f"show all {len(text):,} characters, {lines:,} lines", class_="more")
    return el("details", el("summary", el("pre", head + "…", class_=css), more), el("pre", text, class_=css),
              class_="fold")


def kv_table(values: dict[str, Any], header: tuple[str, str] = ("field", "value")) -> Html:
    rows = []
    for key, value in values.items():
        shown = fold(_as_text(value)) if isinstance(value, (dict, list, str)) else fmt(value)
        rows.append((key, shown))
    return table(header, rows, "kv")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def query_url(path: str, params: dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def asset(name: str) -> str:
    return resources.files("nemo_gym.viewer").joinpath("static", name).read_text(encoding="utf-8")


def link(label: Child, href: str | None, **attributes: str) -> Html:
    """A link, or just its label where there is nowhere to go (the export links only inside itself)."""
    return el("a", label, href=href, **attributes) if href else fragment(label)


def runs_subtitle(globs: dict[str, str]) -> Html:
    """The header's line naming each open run: its label and input glob."""
    return join(" · ", ([f"{label.upper()}: ", el("code", glob)] for label, glob in globs.items()))


def layout(title: str, body: Child, nav: list[tuple[str, str, bool]], subtitle: Child = None,
           inline_assets: bool = False) -> Html:
    """A whole page. `nav`: (href, label, current) links; inline_assets embeds the CSS and JS (the export)."""
    links = [el("a", label, href=href, class_="current" if current else None) for href, label, current in nav]
    if inline_assets:
        head = el("style", trusted(asset("viewer.css")))
        tail = el("script", trusted(asset("viewer.js")))
    else:
        head = el("link", rel="stylesheet", href="/static/viewer.css")
        tail = el("script", src="/static/viewer.js")
    header = el("header", el("span", "ng_view", class_="brand"), el("nav", links), el("span", subtitle, class_="runs"),
                el("button", "unfold all", type="button", id="toggle-folds"))
    return document(title, [el("meta", name="viewport", content="width=device-width, initial-scale=1"), head],
                    [header, el("main", body), tail])
