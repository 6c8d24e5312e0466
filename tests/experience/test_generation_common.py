"""The rules every generation backend shares: length clamping, stop-string merging, output packing."""

import pytest
import torch

from nemo_gym.experience.generation.samples import (
    NO_ROOM,
    GeneratedSample,
    clamp_max_new_tokens,
    merge_stop_strings,
    pack_outputs,
    sample_requests,
)
from tests.experience.generation_support import make_batch


@pytest.mark.parametrize(("config_max", "sample_max", "max_seq_len", "input_length", "expected"), [
    (16, None, 100, 10, 16),  # the config's cap
    (16, 4, 100, 10, 4),  # the sample's own cap
    (16, None, 100, 97, 3),  # the room under max_seq_len
    (16, None, 100, 100, 0),  # no room
    (16, 8, 100, 120, 0),  # over the limit already: never negative
])
def test_clamp_takes_the_tightest_limit(config_max: int, sample_max: int | None, max_seq_len: int,
                                        input_length: int, expected: int) -> None:
    assert clamp_max_new_tokens(config_max, sample_max, max_seq_len, input_length) == expected


def test_merge_stop_strings_keeps_order_without_repeats() -> None:
    assert merge_stop_strings(["</a>", "\n\n"], ["</b>", "</a>"]) == ["</a>", "\n\n", "</b>"]
    assert merge_stop_strings(None, None) == []


def test_sample_requests_resolve_each_row() -> None:
    data = make_batch([[5, 6, 7], [8, 9]], pad_token_id=0, stop_strings=[["x"], None], max_new_tokens=[1, 50])
    config = {"max_new_tokens": 10, "max_seq_len": 11, "stop_strings": ["END"]}
    first, second = sample_requests(data, config)
    assert (first.index, first.prompt_ids, first.max_new_tokens, first.stop_strings) == (0, [5, 6, 7], 1, ["END", "x"])
    assert (second.index, second.prompt_ids, second.max_new_tokens, second.stop_strings) == (1, [8, 9], 9, ["END"])


def test_sample_requests_reject_lengths_outside_the_row() -> None:
    data = make_batch([[5, 6]], pad_token_id=0)
    data["input_lengths"] = torch.tensor([3])
    with pytest.raises(ValueError, match="sample 0: input length 3"):
        sample_requests(data, {"max_new_tokens": 4, "max_seq_len": 10})


def test_pack_outputs_right_pads_prompt_plus_generation() -> None:
    data = make_batch([[5, 6, 7], [8]], pad_token_id=0)
    requests = sample_requests(data, {"max_new_tokens": 4, "max_seq_len": 10})
    out = pack_outputs(requests, [GeneratedSample([11, 12], [-0.5, -0.25], truncated=False), NO_ROOM],
                       pad_token_id=99, min_width=3)
    assert out["output_ids"].tolist() == [[5, 6, 7, 11, 12], [8, 99, 99, 99, 99]]
    assert out["logprobs"].tolist() == [[0.0, 0.0, 0.0, -0.5, -0.25], [0.0] * 5]
    assert out["generation_lengths"].tolist() == [2, 0]
    assert out["unpadded_sequence_lengths"].tolist() == [5, 1]
    assert out["truncated"].tolist() == [False, True]
    assert out["truncated"].dtype == torch.bool


def test_pack_outputs_is_never_narrower_than_the_input() -> None:
    data = make_batch([[5], [6, 7, 8, 9]], pad_token_id=0)
    requests = sample_requests(data.select_indices([0]), {"max_new_tokens": 4, "max_seq_len": 10})
    out = pack_outputs(requests, [GeneratedSample([1], [-1.0], truncated=True)], pad_token_id=0, min_width=4)
    assert out["output_ids"].shape == (1, 4)
