"""Reading a row's model-call records back: our fields kept, anything else ignored, a non-record skipped."""

from nemo_gym.model_calls import ModelCall, calls_of
from nemo_gym.run_format import MODEL_CALLS

RECORD = {"endpoint": "http://127.0.0.1:8000/v1", "model": "m", "started_at": 1.0, "latency_s": 0.5,
          "input_tokens": 10, "output_tokens": 3}


def test_a_record_reads_back_as_the_call_that_wrote_it() -> None:
    call = ModelCall.from_dict(RECORD)
    assert call is not None
    assert call.to_dict() == {**ModelCall("e", "m", 0.0, 0.0).to_dict(), **RECORD}


def test_fields_that_are_not_ours_are_ignored_and_the_record_is_left_as_it_was() -> None:
    record = {**RECORD, "written_by": "another tool"}
    call = ModelCall.from_dict(record)
    assert call is not None and call.input_tokens == 10
    assert "written_by" not in call.to_dict()
    assert record["written_by"] == "another tool"


def test_what_is_not_a_record_is_skipped() -> None:
    row = {MODEL_CALLS: [RECORD, {"model": "no endpoint or times"}, "a string", None, {**RECORD, "model": "n"}]}
    assert [call.model for call in calls_of(row)] == ["m", "n"]
    assert calls_of({MODEL_CALLS: "not a list"}) == []
    assert calls_of({}) == []
