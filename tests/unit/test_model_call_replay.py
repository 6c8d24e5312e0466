"""The replay journal's rules, without servers: the tag's round trip and its removal, the request digest, torn and
foreign lines, compaction, and a model server's answers (recorded by an earlier run: replayed once each; its own
run's: never; a journal it cannot open: answered, unrecorded, logged once)."""

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.model_call_replay import (
    TAG_FIELD,
    Recorded,
    ReplayTag,
    compact_journal,
    read_journal,
    request_digest,
    take_tag,
    tagged,
    without_tag,
)
from nemo_gym.responses_api_models.replay import Journals


def test_the_tag_rides_in_the_metadata_and_leaves_no_trace() -> None:
    tag = ReplayTag((3, 1), "run-a", "/out/r_replay.jsonl")
    params = {"input": "hi", "metadata": {"user": "mine"}}
    sent = tagged(params, tag)
    assert sent["metadata"] == {"user": "mine", TAG_FIELD: tag.encode()} and params == {"input": "hi",
                                                                                         "metadata": {"user": "mine"}}
    body = dict(sent)
    assert take_tag(body) == tag and body == params  # the row's own metadata stays
    bare = tagged({"input": "hi"}, tag)
    assert take_tag(bare) == tag and bare == {"input": "hi"}  # an emptied metadata goes
    assert without_tag({"responses_create_params": sent, "reward": 1.0}) == {"responses_create_params": params,
                                                                             "reward": 1.0}
    for garbage in (None, 7, "", "1.2|run", "a.b|run|/x_replay.jsonl", "1.2||/x_replay.jsonl",
                    "1.2|run|relative_replay.jsonl", "1.2|run|/home/me/.bashrc"):  # no other file to write or read
        assert ReplayTag.decode(garbage) is None


def test_the_digest_ignores_key_order_and_sees_every_turn() -> None:
    assert request_digest({"a": 1, "b": [1, 2]}) == request_digest({"b": [1, 2], "a": 1})
    assert request_digest({"input": ["q", "a1"]}) != request_digest({"input": ["q", "a2"]})


def test_torn_lines_are_skipped_and_compaction_keeps_unfinished_rollouts(tmp_path: Path) -> None:
    journal = tmp_path / "r_replay.jsonl"
    records = [Recorded((task, 0), "run-a", f"d{task}", {"output": [task]}) for task in range(4)]
    journal.write_bytes(b"".join(r.line() for r in records) + b"not json\n" + records[0].line()[:20])
    assert list(read_journal(journal)) == records
    assert compact_journal(journal, lambda key: key[0] % 2 == 1) == 2
    assert [r.key for r in read_journal(journal)] == [(1, 0), (3, 0)]
    assert compact_journal(journal, lambda key: False) == 0 and not journal.exists()
    assert compact_journal(journal, lambda key: True) == 0  # a journal that is not there is no error


def _ask(journals: Journals, body: dict[str, Any], billed: list[dict[str, Any]]) -> Any:
    async def endpoint(request: dict[str, Any]) -> dict[str, Any]:
        billed.append(request)
        return {"output": [f"answer {len(billed)}"], "_ng_model_call": {"started_at": len(billed)}}

    return asyncio.run(journals.answer(body, endpoint))


def test_a_model_server_replays_what_an_earlier_run_recorded(tmp_path: Path) -> None:
    path = str(tmp_path / "r_replay.jsonl")
    billed: list[dict[str, Any]] = []
    first, second = Journals(), Journals()  # two worker processes of one model server
    call = {"input": "q"}
    reply = _ask(first, tagged(call, ReplayTag((0, 0), "run-a", path)), billed)
    assert billed == [call] and reply["_ng_model_call"] == {"started_at": 1}  # untagged at the endpoint
    # The same run again (a retry): asked anew, and recorded again.
    _ask(second, tagged(call, ReplayTag((0, 0), "run-a", path)), billed)
    assert len(billed) == 2 and len(list(read_journal(Path(path)))) == 2
    # The next run: each recorded answer once, then the endpoint; another rollout's key never matches.
    replayed = _ask(first, tagged(call, ReplayTag((0, 0), "run-b", path)), billed)
    assert replayed == {"output": ["answer 1"], "_ng_model_call": {"started_at": 1, "replayed": True}}
    assert len(billed) == 2
    assert _ask(first, tagged(call, ReplayTag((0, 0), "run-b", path)), billed)["output"] == ["answer 2"]
    assert _ask(first, tagged(call, ReplayTag((0, 0), "run-b", path)), billed)["output"] == ["answer 3"]
    assert _ask(first, tagged(call, ReplayTag((5, 0), "run-b", path)), billed)["output"] == ["answer 4"]
    assert _ask(first, tagged({"input": "other"}, ReplayTag((0, 0), "run-c", path)), billed)["output"] == \
        ["answer 5"]
    first.close()
    second.close()


def test_a_journal_out_of_reach_costs_the_call_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journals = Journals()
    tag = ReplayTag((0, 0), "run-a", str(tmp_path / "missing" / "r_replay.jsonl"))
    billed: list[dict[str, Any]] = []
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert _ask(journals, tagged({"input": "q"}, tag), billed)["output"]
    assert len(billed) == 3 and billed[0] == {"input": "q"}
    assert sum("cannot use the replay journal" in r.message for r in caplog.records) == 1
    # Not tried again on each call of that run, even once the folder is there; the next run uses it.
    (tmp_path / "missing").mkdir()
    _ask(journals, tagged({"input": "q"}, tag), billed)
    assert not Path(tag.journal).exists()
    _ask(journals, tagged({"input": "q"}, ReplayTag((0, 0), "run-b", tag.journal)), billed)
    assert len(list(read_journal(Path(tag.journal)))) == 1
    journals.close()
