"""StatefulPromptLoader and PromptSource: deterministic epochs, resumable cursors, batch shapes, re-queues."""

import pytest
import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.prompt_source import PendingPrompt, PromptSource
from tests.experience.collector_fakes import make_dataset

pytestmark = pytest.mark.timeout(30)


def _idx(batches: list) -> list[int]:
    return [d["idx"] for batch in batches for d in batch]


def test_loader_shuffles_each_epoch_by_seed_and_covers_every_prompt() -> None:
    loader = StatefulPromptLoader(make_dataset(10), 3, seed=7)
    first, second = _idx(list(loader)), _idx(list(loader))
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new order each epoch
    again = StatefulPromptLoader(make_dataset(10), 3, seed=7)
    assert _idx(list(again)) == first and _idx(list(again)) == second


def test_loader_resumes_mid_epoch_from_its_state() -> None:
    loader = StatefulPromptLoader(make_dataset(10), 3, seed=1)
    iterator = iter(loader)
    head = _idx([next(iterator), next(iterator)])
    resumed = StatefulPromptLoader(make_dataset(10), 3, seed=1)
    resumed.load_state_dict(loader.state_dict())
    assert head + _idx(list(resumed)) == _idx(list(StatefulPromptLoader(make_dataset(10), 3, seed=1)))


@pytest.mark.parametrize("key, other", [
    ("seed", StatefulPromptLoader(make_dataset(10), 3, seed=2)),
    ("shuffle", StatefulPromptLoader(make_dataset(10), 3, seed=1, shuffle=False)),
    ("batch_size", StatefulPromptLoader(make_dataset(10), 4, seed=1)),
    ("dataset_size", StatefulPromptLoader(make_dataset(11), 3, seed=1)),
])
def test_a_state_saved_under_other_order_settings_is_refused(key: str, other: StatefulPromptLoader) -> None:
    loader = StatefulPromptLoader(make_dataset(10), 3, seed=1)
    next(iter(loader))
    with pytest.raises(ValueError, match=f"saved with {key}=.*, this loader has {key}=.*: its cursor would name"):
        other.load_state_dict(loader.state_dict())


def test_a_restored_finished_epoch_yields_nothing_then_the_next_epoch() -> None:
    loader = StatefulPromptLoader(make_dataset(4), 2, seed=0)
    iterator = iter(loader)
    next(iterator), next(iterator)  # the whole epoch, without reaching StopIteration
    resumed = StatefulPromptLoader(make_dataset(4), 2, seed=0)
    resumed.load_state_dict(loader.state_dict())
    assert list(resumed) == []
    assert resumed.state_dict()["epoch"] == 1 and len(list(resumed)) == 2


def test_source_reads_columnar_batches_with_a_tensor_idx_column() -> None:
    batch = BatchedDataDict(message_log=[[], []], extra_env_info=[None, None], task_name=["t", "t"],
                            idx=torch.tensor([5, 9]))
    source = PromptSource([batch], max_epochs=1)
    prompts = [source.next_prompt(), source.next_prompt()]
    assert [p.key for p in prompts] == [(0, 5), (0, 9)]
    assert prompts[0].datum["task_name"] == "t"
    assert source.next_prompt() is None and source.exhausted


def test_source_numbers_prompts_without_idx_by_position_and_counts_epochs() -> None:
    rows = [{"message_log": [], "extra_env_info": None, "task_name": "t"} for _ in range(3)]
    source = PromptSource([rows[:2], rows[2:]], max_epochs=2)
    keys = []
    while (prompt := source.next_prompt()) is not None:
        keys.append(prompt.key)
    assert keys == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert "2 epoch(s)" in source.exhausted_reason


def test_an_empty_dataloader_is_exhausted_instead_of_spinning() -> None:
    source = PromptSource([], max_epochs=None)
    assert source.next_prompt() is None
    assert source.exhausted and "no prompt in epoch 0" in source.exhausted_reason


def test_requeued_prompts_come_first_and_survive_a_state_round_trip() -> None:
    loader = StatefulPromptLoader(make_dataset(6), 3, shuffle=False)
    source = PromptSource(loader)
    first = source.next_prompt()
    source.requeue([PendingPrompt(datum=first.datum, epoch=0, idx=first.idx, attempts=1)])
    state = source.state_dict()
    restored = PromptSource(StatefulPromptLoader(make_dataset(6), 3, shuffle=False))
    restored.load_state_dict(state)
    drawn = [restored.next_prompt() for _ in range(6)]
    assert [(p.idx, p.attempts) for p in drawn] == [(0, 1), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)]
