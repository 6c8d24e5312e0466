"""The one HTML builder: text is escaped wherever it goes, only the builder's own output passes as markup, unsafe URL
schemes and event-handler attributes cannot be written, and broken UTF-8 cannot break the page's encoding."""

import pytest

from nemo_gym.safe_html import BLOCKED_URL, Html, document, el, fragment, join, safe_url, table, trusted

HOSTILE = "\"'><script>alert(1)</script>&"
ESCAPED = "&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;"


def test_text_is_escaped_in_elements_attributes_and_tables() -> None:
    assert el("p", HOSTILE) == f"<p>{ESCAPED}</p>"
    assert el("a", "x", title=HOSTILE) == f'<a title="{ESCAPED}">x</a>'
    assert table([HOSTILE], [[HOSTILE, el("b", "kept")]], "rows") == (
        f'<table class="rows"><thead><tr><th>{ESCAPED}</th></tr></thead><tbody><tr><td>{ESCAPED}</td>'
        f"<td><b>kept</b></td></tr></tbody></table>")
    # Markup made into a plain str (an f-string) is text again: shown escaped, never run.
    assert el("p", f"{el('b', 'x')}") == "<p>&lt;b&gt;x&lt;/b&gt;</p>"
    assert fragment("a", el("br"), None, [1, 2.5]) == "a<br>12.5" and isinstance(join(", ", ["a", "b"]), Html)


@pytest.mark.parametrize("url", ["javascript:alert(1)", " JaVa\tScRiPt:alert(1)", "data:text/html,<script>",
                                 "vbscript:x"])
def test_unsafe_url_schemes_are_blocked(url: str) -> None:
    assert safe_url(url) == BLOCKED_URL and el("a", "x", href=url) == f'<a href="{BLOCKED_URL}">x</a>'


@pytest.mark.parametrize("url", ["/rows?run=a&q=x:y", "#rollout-a-1-2", "?page=2", "https://example.org/x", "task/1"])
def test_relative_and_web_urls_are_kept(url: str) -> None:
    assert safe_url(url) == url


def test_event_handlers_and_text_in_code_elements_cannot_be_written() -> None:
    with pytest.raises(ValueError, match="no event handlers"):
        el("img", onerror="alert(1)")
    with pytest.raises(ValueError, match="plain word"):
        el("img onerror=alert(1)")
    with pytest.raises(TypeError, match="only trusted"):
        el("script", "alert(1)")
    assert el("style", trusted("p{color:red}")) == "<style>p{color:red}</style>"


def test_lone_surrogates_become_replacement_characters() -> None:
    page = document("t\udc80", None, el("p", "x\ud800y", title="\udfff"))
    assert "\ufffd" in page and page.encode("utf-8")  # encodable: a broken byte cannot fail the response
    cells = table(["h"], [["a\ud800<", 3, None]])  # a table's text cells take the same path
    assert cells.encode("utf-8") and "<td>a\ufffd&lt;</td><td>3</td><td></td>" in cells
