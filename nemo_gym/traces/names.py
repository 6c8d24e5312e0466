"""Span attribute names, in one place: OpenTelemetry's GenAI conventions where one fits (gen_ai.*), ours (nemo_gym.*)
for the rest. Values are counts, names and public endpoints only: never a header, a key or prompt text. Nothing here
imports opentelemetry, so a server names its spans' attributes without it."""

from typing import Mapping

Attributes = Mapping[str, str | int | float | bool]

OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"  # a failure class (nemo_gym.failures), or the exception's type
SERVER_KIND = "nemo_gym.server.kind"
SERVER_IMPLEMENTATION = "nemo_gym.server.implementation"
STEP = "nemo_gym.environment.step"  # a resources server's endpoint: seed_session, verify or a tool's name
TASK_INDEX = "nemo_gym.rollout.task_index"
ROLLOUT_INDEX = "nemo_gym.rollout.rollout_index"
ATTEMPTS = "nemo_gym.rollout.attempts"
REWARD = "nemo_gym.rollout.reward"
ATTEMPT_FAILED = "nemo_gym.rollout.attempt_failed"  # an event on the rollout's span
ATTEMPT = "nemo_gym.rollout.attempt"
HTTP_STATUS = "http.response.status_code"
REPLICA = "nemo_gym.model_call.replica"  # the endpoint's public URL (model_calls.public_endpoint)
CALL_ATTEMPTS = "nemo_gym.model_call.attempts"
RATE_LIMITED = "nemo_gym.model_call.rate_limited"
LATENCY_S = "nemo_gym.model_call.latency_s"
WAIT_S = "nemo_gym.model_call.wait_s"
CACHED_TOKENS = "nemo_gym.usage.cached_tokens"
REASONING_TOKENS = "nemo_gym.usage.reasoning_tokens"


def agent_run(agent: str) -> dict[str, str]:
    """An agent's /run: one rollout attempt."""
    return {OPERATION: "invoke_agent", AGENT_NAME: agent}


def environment_step(step: str, tool: bool = False) -> dict[str, str]:
    """A resources server's endpoint: `step` is seed_session, verify, or the name of a tool the model called."""
    return {STEP: step, OPERATION: "execute_tool", TOOL_NAME: step} if tool else {STEP: step}
