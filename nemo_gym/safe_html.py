"""HTML that is safe by construction, the one way pages are built: the viewer's (nemo_gym.viewer) and the run report
(nemo_gym.metrics.report).

Model output is untrusted input. Here every `str` is text: it is escaped wherever it goes, in an element or in an
attribute value. Only `Html` passes through as markup, and only this module makes it (from escaped text, from
elements built of such parts, or from `trusted`, for markup the package itself ships). A link's URL keeps only a
relative form or an http(s)/mailto scheme, and event-handler attributes (`onclick=...`) cannot be written at all.
A forgotten escape therefore shows `&lt;script&gt;` as text; it cannot run.
"""

import html
import re
from collections.abc import Iterable, Mapping
from typing import Union


class Html(str):
    """Markup that goes into a page as it is. Made only by this module's functions; any plain `str` is text."""

    __slots__ = ()


Child = Union[Html, str, int, float, None, Iterable["Child"]]
AttrValue = Union[str, int, float, bool, None]

BLOCKED_URL = "about:invalid"  # what a URL with an unsafe scheme (javascript:, data:, ...) is replaced by
_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*\Z")  # tag and attribute names come from code, never from data
_VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})
_RAW_TEXT = frozenset({"script", "style"})  # their content is not parsed as HTML: escaping cannot make text safe
_URL_ATTRIBUTES = frozenset({"href", "src", "action", "formaction", "xlink:href"})
_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_IGNORED_IN_SCHEME = re.compile(r"[\x00-\x20\x7f]")  # browsers skip these in a URL's scheme ("java\tscript:")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """`value` as text UTF-8 can encode: a lone surrogate (a broken byte kept by surrogateescape, a lone \\ud800
    escape in a JSON file) becomes U+FFFD, as a browser shows broken UTF-8."""
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def escape(value: object) -> Html:
    """`value` as text (`Html` stays as it is)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(_text(str(value)), quote=True))


def trusted(markup: str) -> Html:
    """Markup the package ships (its style sheet and script): never text that came from a run or a request."""
    return Html(markup)


def safe_url(url: str) -> str:
    """`url` if it is relative or http(s)/mailto; `BLOCKED_URL` for any other scheme (javascript:, data:, ...)."""
    probe = _IGNORED_IN_SCHEME.sub("", url)
    scheme, colon, _ = probe.partition(":")
    if colon and not any(c in scheme for c in "/?#") and scheme.lower() not in _SAFE_SCHEMES:
        return BLOCKED_URL
    return url


def _attribute(key: str, value: AttrValue) -> str:
    name = key.rstrip("_").replace("_", "-")  # class_ -> class, text_anchor -> text-anchor
    if not _NAME.match(name) or name.lower().startswith("on"):
        raise ValueError(f"attribute {name!r} cannot be written: names are plain words, and no event handlers")
    if value is None or value is False:
        return ""
    if value is True:
        return f" {name}"
    text = str(value)
    if name.lower() in _URL_ATTRIBUTES:
        text = safe_url(text)
    return f' {name}="{html.escape(_text(text), quote=True)}"'


def _append(children: Iterable[Child], out: list[str]) -> None:
    for child in children:
        if child is None:
            continue
        if isinstance(child, str):  # Html too: escape() passes it through
            out.append(escape(child))
        elif isinstance(child, bool):
            raise TypeError("a bool is not page content: say what it means in words")
        elif isinstance(child, (int, float)):
            out.append(str(child))
        elif isinstance(child, Iterable) and not isinstance(child, (bytes, Mapping)):
            _append(child, out)
        else:
            raise TypeError(f"cannot put a {type(child).__name__} in a page")


def fragment(*children: Child) -> Html:
    """The children one after another (text escaped)."""
    out: list[str] = []
    _append(children, out)
    return Html("".join(out))


def join(separator: Child, items: Iterable[Child]) -> Html:
    """`items` with `separator` between each two (the markup form of `str.join`)."""
    parts: list[Child] = []
    for item in items:
        parts += [separator, item] if parts else [item]
    return fragment(parts)


def el(tag: str, *children: Child, **attributes: AttrValue) -> Html:
    """One element: `el("a", "next", href=url, class_="open")`. Text children and attribute values are escaped;
    `None` and `False` attributes are left out, `True` ones written bare."""
    if not _NAME.match(tag):
        raise ValueError(f"tag {tag!r} is not a plain word")
    attrs = "".join(_attribute(key, value) for key, value in attributes.items())
    if tag in _VOID:
        if children:
            raise ValueError(f"<{tag}> cannot hold children")
        return Html(f"<{tag}{attrs}>")
    if tag in _RAW_TEXT and not all(isinstance(child, Html) for child in children):
        raise TypeError(f"<{tag}> holds code, not text: only trusted() markup goes in it")
    return Html(f"<{tag}{attrs}>{fragment(*children)}</{tag}>")


def document(title: str, head: Child, body: Child, **body_attributes: AttrValue) -> Html:
    """A whole page, UTF-8, with `head` after its title."""
    return Html("<!DOCTYPE html>" + el(
        "html", el("head", el("meta", charset="utf-8"), el("title", title), head),
        el("body", body, **body_attributes), lang="en"))


def _cell(value: Child) -> Html:
    return escape(value) if type(value) is str else fragment(value)  # the usual cell first: one text


def table(headers: Iterable[Child], rows: Iterable[Iterable[Child]], css: str | None = None) -> Html:
    """A table: a header row, then one row per item of `rows`, one cell per value (text escaped)."""
    head = el("thead", el("tr", (el("th", h) for h in headers)))
    # What `el` would make of each row, without its checks of a fixed tag: a report's table of every metric can
    # have thousands of rows.
    body = Html("<tbody>" + "".join("<tr>" + "".join(f"<td>{_cell(cell)}</td>" for cell in row) + "</tr>"
                                    for row in rows) + "</tbody>")
    return el("table", head, body, class_=css)
