"""Failure classes are one StrEnum whose values are a format: records and error bodies carry the same strings as
before, a misspelt class fails where it is made, and an agent's own marker stays the agent's."""

import orjson
import pytest

from nemo_gym.compat.markers import marked_failure
from nemo_gym.failures import FailureClass, RequestFailed, declared_failure_class, failure_class_of


def test_the_values_on_disk_stay_the_same_strings() -> None:
    assert [c.value for c in FailureClass] == ["connect", "timeout", "http_5xx", "http_4xx", "invalid_response",
                                               "agent_error", "judge_error", "rate_limited"]
    record = RequestFailed(FailureClass.TIMEOUT, "slow", status=None).to_dict()
    assert type(record["failure_class"]) is str and orjson.dumps(record).startswith(b'{"failure_class":"timeout"')


def test_a_misspelt_class_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="'time_out' is not a valid FailureClass"):
        RequestFailed("time_out", "boom")  # type: ignore[arg-type]


def test_an_agent_marker_is_ours_only_when_it_names_one_of_ours() -> None:
    ours = marked_failure({"_ng_failure_class": "timeout", "reward": 0.0})
    theirs = marked_failure({"_ng_failure_class": "transient", "reward": 0.0})
    assert ours is not None and ours.failure_class is FailureClass.TIMEOUT
    assert theirs is not None and theirs.failure_class == "transient"
    assert not isinstance(theirs.failure_class, FailureClass) and declared_failure_class("kill_shaped") == "kill_shaped"


def test_a_relayed_class_that_is_not_ours_is_not_taken() -> None:
    relayed = RequestFailed(FailureClass.HTTP_5XX, "agent 502", status=502,
                            body={"error": {"failure_class": "<script>", "message": "?"}})
    assert failure_class_of(relayed) is FailureClass.HTTP_5XX
