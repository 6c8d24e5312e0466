"""The torch APIs that are not public (nemo_gym/experience/generation/torch_private.py) exist in the installed torch,
and this torch is one the module was checked on: a torch that dropped or renamed one fails here, by name, not in the
middle of a weight update."""

from datetime import timedelta

import torch
import torch._C._distributed_c10d as c10d

from nemo_gym.experience.generation import torch_private


def test_the_installed_torch_is_one_the_private_apis_were_checked_on() -> None:
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert version in torch_private.CHECKED_ON, (
        f"torch {torch.__version__} is not among the versions torch_private.py was checked on "
        f"({', '.join(torch_private.CHECKED_ON)}): check its names against this torch, then add {version}")


def test_every_private_name_exists() -> None:
    missing = [name for name in ("PrefixStore", "ProcessGroupGloo", "Store", "TCPStore") if not hasattr(c10d, name)]
    assert not missing, f"torch._C._distributed_c10d lacks {missing}"
    gloo = c10d.ProcessGroupGloo
    assert hasattr(gloo, "_Options") and hasattr(gloo, "create_device"), "ProcessGroupGloo lacks _Options/create_device"
    options = gloo._Options()
    assert hasattr(options, "_devices") and hasattr(options, "_timeout"), "ProcessGroupGloo._Options lacks a field"


def test_a_group_of_one_built_from_them_broadcasts() -> None:
    store = torch_private.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timedelta(seconds=30))  # a free port
    group = torch_private.gloo_group(store, "torch_private_test", 0, 1, loopback=True, timeout_s=30.0)
    tensor = torch.arange(4, dtype=torch.float32)
    torch_private.broadcast(group, tensor)
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
