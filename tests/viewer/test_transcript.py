"""Rows as transcripts and as HTML: every item kind in order, tool results paired with their call, broken tool
arguments kept as written, unknown items shown, long texts folded, everything escaped."""

from nemo_gym.viewer.render_common import FOLD_CHARS, fold
from nemo_gym.viewer.render_transcript import transcript_html
from nemo_gym.viewer.transcript import transcript


def _row() -> dict:
    return {
        "_ng_task_index": 3, "_ng_rollout_index": 1, "agent_ref": {"name": "agent"},
        "responses_create_params": {"instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in <Paris>?"}]}]},
        "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Call the tool."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": {"weather": "rain"}},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{city: oops"},
            {"type": "web_search_call", "id": "ws1"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Rain."}]},
        ], "usage": {"input_tokens": 12, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}}},
        "reward": 0.5, "extracted_answer": "rain", "expected_city": "Paris",
    }


def test_items_come_in_order_with_calls_and_results_paired() -> None:
    t = transcript(_row())
    assert [(i.kind, i.role, i.part) for i in t.items] == [
        ("message", "system", "prompt"), ("message", "user", "prompt"), ("reasoning", "assistant", "output"),
        ("tool_call", "", "output"), ("tool_result", "", "output"), ("tool_call", "", "output"),
        ("other", "", "output"), ("message", "assistant", "output")]
    call, result, broken = t.items[3], t.items[4], t.items[5]
    assert call.name == "get_weather" and call.text == '{\n  "city": "Paris"\n}'
    assert result.name == "get_weather" and result.call_id == "c1" and '"weather": "rain"' in result.text
    assert broken.text == "{city: oops"  # a model's invalid JSON is shown as it wrote it
    assert '"web_search_call"' in t.items[6].text
    assert list(t.fields) == ["reward", "extracted_answer", "expected_city"]
    assert t.usage == {"input_tokens": 12, "output_tokens": 7, "output_tokens_details.reasoning_tokens": 3}
    assert any("incomplete" in note and "max_output_tokens" in note for note in t.notes)


def test_failure_records_show_their_failure_not_a_transcript() -> None:
    record = {"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}, "failure_class": "timeout",
              "attempts": 3, "last_error": "rollout exceeded rollout_timeout_s=600", "http_status": None}
    t = transcript(record, failed=True)
    assert t.failed and not t.items and t.fields["failure_class"] == "timeout" and t.fields["attempts"] == 3
    assert "Failure" in transcript_html(t, "x")


def test_html_escapes_and_folds_long_texts() -> None:
    page = transcript_html(transcript(_row()), "heading")
    assert "Weather in &lt;Paris&gt;?" in page and "<Paris>" not in page
    assert 'class="item tool-call"' in page and 'class="tool-name">get_weather</code>' in page
    long_text = "line\n" * 50 + "x" * FOLD_CHARS
    folded = fold(long_text)
    assert folded.startswith('<details class="fold">') and f"show all {len(long_text):,} characters" in folded
    assert folded.count("x" * FOLD_CHARS) == 1  # the whole text once, the folded head shows only the start
    assert fold("short") == "<pre>short</pre>"
