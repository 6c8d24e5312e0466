"""One rollout with traces on gives one trace: the collector's rollout span, the agent's /run under it, and under
that every model call (in the model server, with its tokens) and every environment step (seed_session, the tool the
model called, verify), linked by parent span ids, exported by OTLP/HTTP to a real receiver on loopback that decodes
the protobuf wire format. Real processes: ng_run and ng_collect_rollouts, with a stub vLLM in this process."""

import os
from pathlib import Path

import orjson

from nemo_gym.responses_api_models.vllm_model.tests.test_vllm_model import StubVLLM
from nemo_gym.traces import names
from tests.collection.util import read_rows, run_cli
from tests.helpers.stack import REPO_ROOT, environment_config, running_stack
from tests.traces.otlp_receiver import OtlpReceiver, ReceivedSpan, in_trace

AGENT = "example_single_tool_call_simple_agent"
PROMPT = "What's the weather in Paris?"
API_KEY = "sk-trace-test-secret"
SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
# The exporters' batches go out every 100 ms rather than every 5 s (the SDK reads this from the environment).
FAST_EXPORT = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "100", "PYTHONPATH": str(REPO_ROOT)}


def _rollout_trace_complete(spans: list[ReceivedSpan]) -> bool:
    roots = [s for s in spans if s.name == f"rollout {AGENT}"]
    if not roots:
        return False
    names_in_trace = [s.name for s in in_trace(spans, roots[0].trace_id)]
    return names_in_trace.count("chat stub-model") == 2 and {"POST /verify", "POST /run"} <= set(names_in_trace)


def test_one_rollout_gives_one_linked_trace_with_tokens(tmp_path: Path) -> None:
    row = orjson.loads((REPO_ROOT / "nemo_gym/resources_servers/example_single_tool_call/data/example.jsonl")
                       .read_bytes().splitlines()[0])
    assert row["responses_create_params"]["input"][0]["content"] == PROMPT
    (tmp_path / "in.jsonl").write_bytes(orjson.dumps(row) + b"\n")
    with OtlpReceiver() as receiver, StubVLLM() as model:
        traces = [f"+traces.otlp_endpoint={receiver.url}", "+traces.service_names={policy_model: the-policy}"]
        configs = f"{environment_config('example_single_tool_call')},{REPO_ROOT / 'configs' / 'vllm_model.yaml'}"
        stack = [f"+config_paths=[{configs}]", f"+policy_base_url={model.url}", f"+policy_api_key={API_KEY}",
                 "+policy_model_name=stub-model", *traces]
        with running_stack([*stack, f"+log_dir={tmp_path}/logs"], tmp_path) as running:
            head_port = int(running.head_url.rsplit(":", 1)[1])
            result = run_cli("collect", [f"+head_server.port={head_port}", f"+agent_name={AGENT}",
                                         f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                                         f"+output_jsonl_fpath={tmp_path}/out/r.jsonl", *traces],
                             tmp_path, env=FAST_EXPORT)
            assert result.returncode == 0, result.stdout + result.stderr
            receiver.wait_for(_rollout_trace_complete)
        model_headers = [request["headers"] for request in model.requests]
        spans = receiver.received()  # every server has stopped, its buffered spans sent: nothing more comes
    assert receiver.bad_bodies == 0
    (out,) = read_rows(tmp_path / "out" / "r.jsonl")

    (rollout,) = [s for s in spans if s.name == f"rollout {AGENT}"]
    trace = list(in_trace(spans, rollout.trace_id))
    by_id = {s.span_id: s for s in trace}

    def parent(span: ReceivedSpan) -> ReceivedSpan:
        return by_id[span.parent_span_id]

    # The rollout is the root, in the collector's process.
    assert rollout.parent_span_id == "" and rollout.service == "ng_collect_rollouts"
    assert rollout.attributes[names.AGENT_NAME] == AGENT
    assert rollout.attributes[names.ATTEMPTS] == 1 and rollout.attributes[names.REWARD] == out["reward"]
    # Its one attempt: the agent's /run, across the HTTP hop.
    (run,) = [s for s in trace if s.name == "POST /run"]
    assert parent(run) is rollout and run.service == AGENT and run.kind == SERVER
    assert run.attributes[names.OPERATION] == "invoke_agent" and run.attributes[names.HTTP_STATUS] == 200
    # The environment's steps: seed, the tool the model called, verify.
    steps = {s.attributes[names.STEP]: s for s in trace if names.STEP in s.attributes}
    assert sorted(steps) == ["get_weather", "seed_session", "verify"]
    assert all(parent(s) is run and s.service == "example_single_tool_call" for s in steps.values())
    assert steps["get_weather"].attributes[names.TOOL_NAME] == "get_weather"
    # Two model calls (the tool call, then the answer), each under the model server's request, named as configured.
    calls = [s for s in trace if s.name == "chat stub-model"]
    assert len(calls) == 2
    for call in calls:
        assert call.service == "the-policy" and call.kind == CLIENT
        assert parent(call).name == "POST /v1/responses" and parent(parent(call)) is run
        assert call.attributes[names.INPUT_TOKENS] == 7 and call.attributes[names.OUTPUT_TOKENS] == 3
        assert call.attributes[names.REQUEST_MODEL] == "stub-model" and call.attributes[names.CALL_ATTEMPTS] == 1
        assert call.attributes[names.REPLICA] == model.url and call.attributes[names.LATENCY_S] > 0
    # The trace went on to the endpoint: each generation request carried its model call span's traceparent.
    sent = sorted(headers["traceparent"].rsplit("-", 1)[0] for headers in model_headers)  # without the flags
    assert sent == sorted(f"00-{rollout.trace_id}-{call.span_id}" for call in calls)
    # rollout, /run, 3 steps, 2 x (/v1/responses, its model call), and nothing else
    assert len(trace) == 9, " ".join(f"{s.service}:{s.name}" for s in trace)
    # No secret and no prompt text in any span.
    for span in spans:
        text = orjson.dumps([span.attributes, span.events]).decode()
        assert API_KEY not in text and "Paris" not in text and "authorization" not in text.lower(), span
