"""A corpus of bad inputs and options: each is refused before any rollout with one clear line naming the file:line
(where there is one) and the field, exit code 2, no file written or changed. Odd but valid text is collected."""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from tests.collection.util import read_rows, run_cli
from tests.reliability.conftest import CITIES, ReliabilityStack, write_weather_rows

HUGE = 5 * 1024 * 1024


def _row(content: str = "What's the weather in Paris?", **extra: object) -> bytes:
    return orjson.dumps({"responses_create_params": {"input": [{"role": "user", "content": content}]},
                         "expected_city": "Paris", **extra}) + b"\n"


def _rcp(params: object) -> bytes:
    return orjson.dumps({"responses_create_params": params}) + b"\n"


@dataclass
class Case:
    id: str
    content: bytes
    expected: list[str]  # fragments of the error line; "{in}" is the input path
    args: list[str] = field(default_factory=list)  # "{tmp}" is the test's directory

    def param(self) -> object:
        return pytest.param(self, id=self.id)


CASES = [
    Case("malformed_json", _row() + b'{"responses_create_params": {"input": "x"}\n', ["{in}:2: malformed JSON"]),
    Case("truncated_last_line", _row() * 2 + b'{"responses_create_params": {"inp', ["{in}:3: malformed JSON"]),
    Case("json_array_per_line", b'[{"responses_create_params": {"input": "x"}}]\n',
         ["{in}:1: a row must be a JSON object, got list"]),
    Case("bare_string_row", b'"What is the weather?"\n', ["{in}:1: a row must be a JSON object, got str"]),
    Case("missing_responses_create_params", _row() + b'{"expected_city": "Paris"}\n',
         ["{in}:2: missing responses_create_params"]),
    Case("responses_create_params_not_object", _rcp("hello"),
         ["{in}:1: responses_create_params must be a JSON object, got str"]),
    Case("missing_input", _rcp({"temperature": 0.5}), ["{in}:1: missing responses_create_params.input"]),
    Case("input_not_list_or_str", _rcp({"input": 42}),
         ["{in}:1: responses_create_params.input must be a string or a list of messages"]),
    Case("input_list_of_strings", _rcp({"input": ["hi"]}),
         ["{in}:1: responses_create_params.input must be a list of message objects"]),
    Case("tools_not_list", _rcp({"input": "x", "tools": {"type": "function"}}),
         ["{in}:1: responses_create_params.tools must be a list"]),
    Case("unknown_agent", _row() + _row(agent_ref={"name": "no_such_agent"}),
         ["{in}:2: unknown agent 'no_such_agent'", "example_single_tool_call_simple_agent"]),
    Case("agent_ref_wrong_type", _row(agent_ref="weather"), ["{in}:1: agent_ref must look like"]),
    # Repeated task indices, and indices on some rows only, are valid (NeMo Gym's grouping): see below.
    Case("negative_caller_task_index", _row() + _row(_ng_task_index=-1),
         ["{in}:2: _ng_task_index must be a non-negative integer below 2**63, got -1"]),
    Case("string_caller_task_index", _row(_ng_task_index="7"),
         ["{in}:1: _ng_task_index must be a non-negative integer below 2**63, got '7'"]),
    Case("float_caller_task_index", _row(_ng_task_index=1.5),
         ["{in}:1: _ng_task_index must be a non-negative integer below 2**63, got 1.5"]),
    Case("bool_caller_task_index", _row(_ng_task_index=True),
         ["{in}:1: _ng_task_index must be a non-negative integer below 2**63, got True"]),
    Case("null_caller_task_index", _row(_ng_task_index=None),
         ["{in}:1: _ng_task_index must be a non-negative integer below 2**63, got None"]),
    Case("temperature_string", _row() + _rcp({"input": "x", "temperature": "hot"}),
         ["{in}:2: responses_create_params.temperature must be a number or null, got 'hot'"]),
    Case("max_output_tokens_float", _rcp({"input": "x", "max_output_tokens": 64.5}),
         ["{in}:1: responses_create_params.max_output_tokens must be an integer or null, got 64.5"]),
    Case("top_p_bool", _rcp({"input": "x", "top_p": True}),
         ["{in}:1: responses_create_params.top_p must be a number or null, got True"]),
    Case("tool_choice_number", _rcp({"input": "x", "tool_choice": 3}),
         ["{in}:1: responses_create_params.tool_choice must be a string or an object, got 3"]),
    Case("truncation_unknown", _rcp({"input": "x", "truncation": "sometimes"}),
         ["{in}:1: responses_create_params.truncation must be 'auto' or 'disabled' or null, got 'sometimes'"]),
    Case("stream_true", _rcp({"input": "x", "stream": True}),
         ["{in}:1: responses_create_params.stream must be false or null, got True"]),
    Case("override_temperature_string", _row(), ["+responses_create_params.temperature must be a number", "'hot'"],
         ["+responses_create_params.temperature=hot"]),
    Case("empty_file", b"", ["{in}: no rows"]),
    Case("whitespace_only_file", b"  \n\t\n\n", ["{in}: no rows"]),
    Case("bom_at_file_start", b"\xef\xbb\xbf" + _row(), ["{in}:1: malformed JSON", "byte order mark"]),
    Case("invalid_utf8", b'{"responses_create_params": {"input": "caf\xe9"}}\n', ["{in}:1: malformed JSON", "UTF-8"]),
    Case("lone_surrogate", b'{"responses_create_params": {"input": "\\ud800"}}\n', ["{in}:1: malformed JSON"]),
    Case("huge_row_then_bad_row", _row("Paris? " + "x" * HUGE) + b"{oops}\n", ["{in}:2: malformed JSON"]),
    Case("num_repeats_negative", _row(), ["+num_repeats must be a positive integer, got -2"], ["+num_repeats=-2"]),
    Case("num_repeats_zero", _row(), ["+num_repeats must be a positive integer, got 0"], ["+num_repeats=0"]),
    Case("num_repeats_string", _row(), ["+num_repeats must be", "got 'many'"], ["+num_repeats=many"]),
    Case("limit_negative", _row(), ["+limit must be at least 0", "got -5"], ["+limit=-5"]),
    Case("prompt_config_missing_file", _row(), ["+prompt_config: file not found"],
         ["+prompt_config={tmp}/no_such_prompt.yaml"]),
    Case("prompt_config_bad_yaml", b'{"city": "Paris"}\n', ["+prompt_config", "invalid YAML"],
         ["+prompt_config={tmp}/bad_prompt.yaml"]),
    Case("prompt_config_missing_field", b'{"town": "Paris"}\n', ["{in}:1: +prompt_config", "uses {{city}}"],
         ["+prompt_config={tmp}/prompt.yaml"]),
    Case("nonexistent_input_file", b"", ["input file not found: {tmp}/missing.jsonl"],
         ["+input_jsonl_fpath={tmp}/missing.jsonl"]),
    Case("output_path_is_a_directory", _row(), ["+output_jsonl_fpath", "is a directory"],
         ["+output_jsonl_fpath={tmp}/existing_dir"]),
    Case("output_same_as_input", _row(), ["+output_jsonl_fpath must differ from +input_jsonl_fpath"],
         ["+output_jsonl_fpath={tmp}/in.jsonl"]),
]


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with the hash of its content (directories map to '')."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            for p in sorted(root.rglob("*"))}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_input_is_refused_with_one_clear_line_and_nothing_written(
        reliability_stack: ReliabilityStack, tmp_path: Path, case: Case) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(case.content)
    (tmp_path / "existing_dir").mkdir()
    (tmp_path / "bad_prompt.yaml").write_text("user: [unclosed\n")
    (tmp_path / "prompt.yaml").write_text("user: \"What's the weather in {city}?\"\n")
    given = [arg.format(tmp=tmp_path) for arg in case.args]
    defaults = [f"+input_jsonl_fpath={source}", f"+output_jsonl_fpath={tmp_path}/out/r.jsonl"]
    args = [d for d in defaults if d.split("=")[0] not in {g.split("=")[0] for g in given}] + given
    before = _snapshot(tmp_path)
    result = run_cli("collect", reliability_stack.args(*args), tmp_path, timeout=50)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in case.expected:
        assert fragment.format(**{"in": source, "tmp": tmp_path}) in lines[0], lines[0]
    assert _snapshot(tmp_path) == before


@pytest.mark.timeout(60)
def test_huge_and_unusual_text_rows_are_collected_intact(reliability_stack: ReliabilityStack, tmp_path: Path) -> None:
    odd = ["emoji 🌧️☔🧭 and ZWJ 👩‍🔬", "RTL مرحبا بالعالم", "combining é and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "line\u2028separator\u2029",
           "quotes \" ' ` and \\ backslash", "tab\tand\r\ncarriage return", "x" * HUGE]
    source = write_weather_rows(tmp_path / "in.jsonl", len(odd))
    rows = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    for row, text in zip(rows, odd):
        row["note"] = text
        row["responses_create_params"]["input"][0]["content"] += " " + text
    source.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    out = tmp_path / "r.jsonl"
    result = run_cli("collect", reliability_stack.args(f"+input_jsonl_fpath={source}",
                                                       f"+output_jsonl_fpath={out}"), tmp_path, timeout=50)
    assert result.returncode == 0, result.stdout + result.stderr
    collected = {row["_ng_task_index"]: row for row in read_rows(out)}
    assert sorted(collected) == list(range(len(odd)))
    for index, text in enumerate(odd):
        assert collected[index]["note"] == text and collected[index]["reward"] == 1.0
        assert collected[index]["expected_city"] == CITIES[index % len(CITIES)]


@pytest.mark.timeout(60)
def test_repeated_lines_and_some_caller_task_indices_are_grouped(reliability_stack: ReliabilityStack,
                                                                 tmp_path: Path) -> None:
    """Once refused as bad input, now NeMo Gym's rule: a repeated line samples its task again, and a caller's index
    may repeat and sit on some rows only (here 0, which is also the first automatic index: they are one task)."""
    paris, tokyo = _row("Paris?"), _row("Tokyo?")
    source = tmp_path / "in.jsonl"
    source.write_bytes(paris + tokyo + paris + _row("Cairo?", _ng_task_index=0) + tokyo
                       + _row("Lima?", _ng_task_index=9))
    out = tmp_path / "r.jsonl"
    result = run_cli("collect", reliability_stack.args(f"+input_jsonl_fpath={source}", f"+output_jsonl_fpath={out}",
                                                       "+num_repeats=2"), tmp_path, timeout=50)
    assert result.returncode == 0, result.stdout + result.stderr
    keys = sorted((row["_ng_task_index"], row["_ng_rollout_index"]) for row in read_rows(out))
    assert keys == [(0, r) for r in range(6)] + [(1, r) for r in range(4)] + [(9, 0), (9, 1)]
