"""HTML building blocks shared by every view and by the exported report: escaping, numbers, folded long texts,
tables and the page layout. Pages are rendered on the server; the browser gets plain HTML (plus viewer.js for
conveniences), and the export reuses the same functions with the assets inlined."""

import html
import math
from importlib import resources
from typing import Any, Iterable
from urllib.parse import urlencode

import orjson

FOLD_CHARS = 1200
FOLD_LINES = 24
FOLD_HEAD_CHARS = 400


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """A metric or count for display: 4 significant digits, n/a for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return esc(value)


def fold(text: str, css: str = "") -> str:
    """`text` in a <pre>; a long one shows its head and unfolds to the whole on a click."""
    lines = text.count("\n") + 1
    cls = f' class="{css}"' if css else ""
    if len(text) <= FOLD_CHARS and lines <= FOLD_LINES:
        return f"<pre{cls}>{esc(text)}</pre>"
    head = "\n".join(text[:FOLD_HEAD_CHARS].split("\n")[:8])
    return (f'<details class="fold"><summary><pre{cls}>{esc(head)}…</pre><span class="more">show all '
            f"{len(text):,} characters, {lines:,} lines</span></summary><pre{cls}>{esc(text)}</pre></details>")


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], css: str = "") -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def kv_table(values: dict[str, Any], header: tuple[str, str] = ("field", "value")) -> str:
    rows = []
    for key, value in values.items():
        shown = fold(_as_text(value)) if isinstance(value, (dict, list, str)) else fmt(value)
        rows.append((esc(key), shown))
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


def layout(title: str, body: str, nav: list[tuple[str, str, bool]], subtitle: str = "",
           inline_assets: bool = False) -> str:
    """A whole page. `nav`: (href, label, current) links; inline_assets embeds the CSS and JS (the export)."""
    links = "".join(f'<a href="{esc(href)}"{" class=current" if current else ""}>{esc(label)}</a>'
                    for href, label, current in nav)
    if inline_assets:
        head = f"<style>{asset('viewer.css')}</style>"
        tail = f"<script>{asset('viewer.js')}</script>"
    else:
        head = '<link rel="stylesheet" href="/static/viewer.css">'
        tail = '<script src="/static/viewer.js"></script>'
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f'<meta name="viewport" content="width=device-width, initial-scale=1">{head}</head>'
            f'<body><header><span class="brand">ng_view</span><nav>{links}</nav>'
            f'<span class="runs">{subtitle}</span><button type="button" id="toggle-folds">unfold all</button>'
            f"</header><main>{body}</main>{tail}</body></html>")
