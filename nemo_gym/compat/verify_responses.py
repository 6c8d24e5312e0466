"""NeMo Gym 0.4.0's `/aggregate_metrics` body, both ways.

Its collector POSTs `{"verify_responses": [row, ...]}`: every rollout of one agent, each the verify response minus
`response` and `responses_create_params` (but keeping `response.usage`), and reads back
`{"agent_metrics": {...}, "key_metrics": {...}, "group_level_metrics": [{..., "_ng_task_index": i}]}`.
Ours POSTs the library's metrics and compact rows instead (see nemo_gym.rollout_collection.aggregate).
"""

from typing import Any, AsyncIterator, Callable, Iterable

import orjson

from nemo_gym.errors import NemoGymError
from nemo_gym.json_chunks import as_async, json_array_chunks
from nemo_gym.failures import FailureClass, RequestFailed

VERIFY_RESPONSES = "verify_responses"
_HEAVY_FIELDS = ("response", "responses_create_params")


class VerifyResponsesError(NemoGymError):
    """A `verify_responses` body that breaks NeMo Gym's format."""


def verify_response_rows(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows of a NeMo Gym `/aggregate_metrics` body, or None when the body is not one."""
    if VERIFY_RESPONSES not in body:
        return None
    rows = body[VERIFY_RESPONSES]
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise VerifyResponsesError("aggregate_metrics: 'verify_responses' must be a list of objects")
    return rows


def strip_row(row: dict[str, Any]) -> dict[str, Any]:
    """A rollout row as NeMo Gym's collector sends it to `/aggregate_metrics`."""
    stripped = {key: value for key, value in row.items() if key not in _HEAVY_FIELDS}
    response = row.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if usage:
        stripped["response"] = {"usage": usage}
    return stripped


def verify_responses_body(lines: Callable[[], Iterable[bytes]],
                          keep: Callable[[dict[str, Any]], bool]) -> AsyncIterator[bytes]:
    """`{"verify_responses": [...]}` in chunks, from a fresh pass over `lines()` (rollout JSONL lines), keeping the
    rows `keep` accepts: the rows are never all in memory on this side."""
    rows = (strip_row(row) for row in map(orjson.loads, lines()) if keep(row))
    return as_async(json_array_chunks(b'{"' + VERIFY_RESPONSES.encode() + b'":[', rows))


def check_answer(answer: Any, url: str) -> dict[str, Any]:
    """NeMo Gym's AggregateMetrics answer, checked: every field optional, each of its declared type."""
    # A malformed answer is the server's fault (downstream), like any other invalid response.
    if not isinstance(answer, dict):
        raise RequestFailed(FailureClass.INVALID_RESPONSE,
                            f"{url} did not answer /aggregate_metrics with a JSON object", url=url)
    for key, kind in (("agent_metrics", dict), ("key_metrics", dict), ("group_level_metrics", list)):
        if answer.get(key) is not None and not isinstance(answer[key], kind):
            raise RequestFailed(FailureClass.INVALID_RESPONSE,
                                f"{url}: '{key}' of the /aggregate_metrics answer must be a {kind.__name__}", url=url)
    return answer

