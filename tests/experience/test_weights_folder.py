"""The weights folder format (generation/weights.py): the atomic writer, the checker every backend runs before it
touches a replica, the in-place copy into a module, and the per-generation weight-version bookkeeping."""

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from nemo_gym.experience.generation.weight_versions import WeightVersionLog
from nemo_gym.experience.generation.weights import check_weights_dir, copy_weights_into, read_weights, write_weights


class TinyLM(torch.nn.Module):
    """Embedding and head tied, as in the bundled model: save_pretrained writes the shared tensor once."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.proj = torch.nn.Linear(3, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight

    def save_pretrained(self, folder: Path) -> None:
        state = {k: v for k, v in self.state_dict().items() if k != "head.weight"}
        save_file({k: v.contiguous() for k, v in state.items()}, str(Path(folder) / "model.safetensors"))
        (Path(folder) / "config.json").write_text("{}")


def test_write_weights_publishes_a_complete_folder_and_refuses_to_overwrite(tmp_path: Path) -> None:
    model = TinyLM()
    target = write_weights(model, tmp_path / "v1")
    assert target == tmp_path / "v1" and sorted(p.name for p in target.iterdir()) == ["config.json",
                                                                                    "model.safetensors"]
    assert torch.equal(read_weights(target)["proj.weight"], model.proj.weight)
    with pytest.raises(FileExistsError, match="fresh folder"):
        write_weights(model, target)
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]  # no temporary folder left beside it


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    class Broken(TinyLM):
        def save_pretrained(self, folder: Path) -> None:
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_weights(Broken(), tmp_path / "v1")
    assert list(tmp_path.iterdir()) == []


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "w"
    folder.mkdir()
    save_file({"a": torch.ones(2, 3), "b": torch.zeros(4)}, str(folder / "model.safetensors"))
    return folder


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-5])


def _garble_header(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:12] = b"\xff\xfe{["
    (folder / "model.safetensors").write_bytes(bytes(data))


def _bad_offsets(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header["a"]["data_offsets"] = [0, 8]  # 2x3 float32 needs 24 bytes
    raw = json.dumps(header, separators=(",", ":")).encode().ljust(size)
    path.write_bytes(data[:8] + raw + data[8 + size:])


@pytest.mark.parametrize(("damage", "says"), [
    (lambda f: None, None),
    (lambda f: (f / "model.safetensors").unlink(), "has no \\*.safetensors file"),
    (_truncate, "truncated or corrupt"),
    (lambda f: (f / "model.safetensors").write_bytes(b"\x01"), "too short"),
    (_garble_header, "unreadable safetensors header"),
    (_bad_offsets, "tensor a has offsets \\[0, 8\\] that do not fit F32\\[2, 3\\]"),
    (lambda f: (f / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001.safetensors"}})), "shards named by .* are missing"),
])
def test_check_weights_dir_names_what_is_wrong(tmp_path: Path, damage, says) -> None:
    folder = _folder(tmp_path)
    damage(folder)
    if says is None:
        assert check_weights_dir(folder) == [folder / "model.safetensors"]
        return
    with pytest.raises(ValueError, match=says):
        check_weights_dir(folder)


def test_check_weights_dir_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        check_weights_dir(tmp_path / "nowhere")


def test_copy_weights_into_changes_nothing_unless_everything_matches() -> None:
    model, other = TinyLM(), TinyLM()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new = {k: v for k, v in other.state_dict().items() if k != "head.weight"}  # tied: written once
    for bad, says in [({**new, "extra": torch.ones(1)}, "does not have"),
                      ({**new, "proj.bias": torch.ones(4)}, "another shape"),
                      ({k: v for k, v in new.items() if k != "proj.bias"}, "not in the folder.*proj.bias")]:
        with pytest.raises(ValueError, match=says):
            copy_weights_into(model, bad)
        assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    copy_weights_into(model, new)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in other.state_dict().items())
    assert model.head.weight is model.embed.weight  # still tied


def test_weight_version_log_tags_a_generation_with_every_version_it_may_have_used() -> None:
    log = WeightVersionLog(3)
    quiet = log.mark()
    assert log.since(quiet) == (3,)
    spans_update = log.mark()
    log.begin(4)
    sent_during_update = log.mark()
    log.end(succeeded=True)
    assert log.version == 4
    assert log.since(spans_update) == (3, 4) and log.since(sent_during_update) == (3, 4)
    after = log.mark()
    log.begin(5)
    log.end(succeeded=False)  # a failed update may still have changed some replica's weights
    assert log.version == 4 and log.since(after) == (4, 5)
    assert log.since(log.mark()) == (4,)
