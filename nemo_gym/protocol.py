"""The one place for OpenAI Responses API / Chat Completions shapes and the conversions between them.

Bodies travel as plain dicts (decoded by orjson) for speed; this module knows their fields.
"""

# Sent by the agent on every call that belongs to one rollout: resources servers key their per-rollout state on it
# and model servers use it to keep a rollout on one vLLM replica.
SESSION_HEADER = "x-ng-session-id"
