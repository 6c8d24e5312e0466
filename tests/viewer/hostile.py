"""A run whose rows carry hostile content in every field the viewer and the report show, and a loopback trap that a
successful injection would call.

Each field holds `payload(field)`: a script tag, event attributes in and out of quoted attributes, a `javascript:`
link, tags that close the text's container, an iframe and a style sheet. Executed or loaded, each either opens a
dialog naming its field or requests `<trap>/<vector>/<field>`. Some fields are also 1 MB lines, and two rows hold
broken UTF-8 (bytes that are not UTF-8; a lone surrogate escape, as Python's json module writes).
"""

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import orjson

from nemo_gym.run_files.manifest import write_manifest
from nemo_gym.run_files.metrics_file import writing_metrics
from nemo_gym.run_files.paths import RunPaths

MB_LINE = 1 << 20
BROKEN_BYTES = b"\xff\xfe\xc3("  # none of these starts a UTF-8 character that the next byte completes
LONE_SURROGATE = rb"\udc80"
BROKEN_MARK, SURROGATE_MARK = "@@broken@@", "@@surrogate@@"


@dataclass
class Trap:
    """A loopback HTTP server of the test's own: any request it gets is a leaked injection."""

    url: str
    hits: list[str] = field(default_factory=list)


@contextmanager
def running_trap() -> Iterator[Trap]:
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Trap(f"http://127.0.0.1:{server.server_address[1]}", hits)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def payload(name: str, trap: str) -> str:
    """Markup that opens a dialog naming `name`, or requests the trap, if a page lets it through as markup."""
    return (f'<script>alert("{name}");fetch("{trap}/script/{name}")</script>'
            f'<img src="{trap}/img/{name}" onerror="alert(\'{name}\')">'
            f'"><svg onload="alert(\'{name}\')"></svg>'
            f"'><img src=x onerror=alert('{name}')>"
            f'<a id="js-{name}" href="javascript:alert(\'{name}\')">click me</a>'
            f'</pre></code></td></textarea></title></style><iframe src="{trap}/frame/{name}"></iframe>'
            f'<link rel="stylesheet" href="{trap}/css/{name}"><!--')


@dataclass(frozen=True)
class HostileRun:
    rollouts: Path
    agent: str
    failure_class: str
    rows: int  # rollout rows, failures not counted
    items_per_row: int  # transcript items of every rollout row
    tasks: list[int]


def _row(task: int, rollout: int, agent: str, trap: str, reward: float, long_prompt: str = "",
         long_answer: str = "", mark: str = "") -> dict[str, Any]:
    def p(name: str) -> str:
        return payload(name, trap) + mark

    return {
        "_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent},
        "responses_create_params": {"instructions": p("instructions"), "input": [
            {"role": p("role"), "content": p("message_of_role")},
            {"role": "user", "content": [{"type": "input_text", "text": long_prompt + p("prompt")}]}]},
        "response": {
            "status": p("status"), "incomplete_details": {"reason": p("incomplete_reason")},
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": p("reasoning")}]},
                {"type": "function_call", "call_id": p("call_id"), "name": p("tool_name"), "arguments": p("arguments")},
                {"type": "function_call_output", "call_id": p("call_id"), "output": p("tool_result")},
                {"type": p("item_type"), "detail": p("unknown_item")},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": long_answer + p("answer")},
                    {"type": "refusal", "refusal": p("refusal")}]},
            ],
            "usage": {"input_tokens": 12, "output_tokens": 7, p("usage_key"): {p("usage_inner"): 3}},
        },
        "reward": reward, "extracted_answer": p("extracted_answer"),
        p("verifier_key"): p("verifier_value"), payload("numeric_field", trap): 0.25,
    }


ITEMS_PER_ROW = 8  # instructions, two prompt messages, reasoning, tool call, tool result, unknown item, answer


def write_hostile_run(directory: Path, trap: str, all_correct: bool = False, broken_utf8: bool = True) -> HostileRun:
    """Tasks 0..3, two rollouts each, rewards 0 then 1 (1 and 1 with `all_correct`); task 3's second rollout failed
    (a hostile failure record). Task 1 holds the 1 MB lines, task 2 the broken UTF-8 (unless `broken_utf8` is
    false: the report's run, read by the aggregation, which takes only JSON it can decode)."""
    directory.mkdir(parents=True, exist_ok=True)
    agent = payload("agent", trap)
    failure_class = payload("failure_class", trap)
    rollouts = directory / "rollouts.jsonl"
    megabyte = "A" * MB_LINE
    lines = []
    for task in range(4):
        for rollout in range(2):
            if (task, rollout) == (3, 1):
                continue
            long = {"long_prompt": megabyte, "long_answer": megabyte} if task == 1 else {}
            mark = (BROKEN_MARK if rollout == 0 else SURROGATE_MARK) if task == 2 and broken_utf8 else ""
            reward = 1.0 if all_correct else float(rollout)
            line = orjson.dumps(_row(task, rollout, agent, trap, reward, mark=mark, **long))
            lines.append(line.replace(BROKEN_MARK.encode(), BROKEN_BYTES).replace(SURROGATE_MARK.encode(),
                                                                                   LONE_SURROGATE))
    rollouts.write_bytes(b"".join(line + b"\n" for line in lines))
    paths = RunPaths(rollouts)
    failure = {"_ng_task_index": 3, "_ng_rollout_index": 1, "agent_ref": {"name": agent},
               "failure_class": failure_class, "attempts": 2, "last_error": payload("last_error", trap),
               "http_status": 502}
    paths.failures.write_bytes(orjson.dumps(failure) + b"\n")
    write_manifest(paths.manifest, {"note": payload("manifest", trap)})
    with writing_metrics(paths.aggregate_metrics) as metrics:
        metrics.add(agent, {payload("environment_metric", trap): 1.0}, {payload("key_metric", trap): 0.5}, [])
    return HostileRun(rollouts, agent, failure_class, rows=len(lines), items_per_row=ITEMS_PER_ROW, tasks=[0, 1, 2, 3])
