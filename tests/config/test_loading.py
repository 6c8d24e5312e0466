"""Config loading rules shared with NeMo Gym: nested config_paths, path lookup, directives, no silent drops."""

from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.config.loader import INSTALL_ROOT
from nemo_gym.errors import ConfigError

SERVER = "{kind}:\n  resources_servers:\n    math: {{verify_workers: {n}}}\n"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.name


def test_nested_config_paths_merge_after_the_file_that_lists_them(tmp_path: Path) -> None:
    write(tmp_path / "top.yaml", "config_paths: [sub/mid.yaml]\nx: top\ny: top\nz: top\n")
    write(tmp_path / "sub" / "mid.yaml", "config_paths: [sub/leaf.yaml]\ny: mid\nz: mid\n")  # relative to cwd
    write(tmp_path / "sub" / "leaf.yaml", "z: leaf\n")
    cfg = load_global_config(["+config_paths=[top.yaml]"], cwd=tmp_path)
    # As in NeMo Gym: the list grows breadth-first and later files win, so a nested file overrides its parent.
    assert (cfg.get("x"), cfg.get("y"), cfg.get("z")) == ("top", "mid", "leaf")
    assert cfg.get("config_paths") == ["top.yaml", "sub/mid.yaml", "sub/leaf.yaml"]
    assert cfg.source_of("z") == "sub/leaf.yaml:1"
    assert load_global_config(["+config_paths=[top.yaml]", "+z=cli"], cwd=tmp_path).get("z") == "cli"


def test_relative_path_falls_back_to_the_install_root(tmp_path: Path) -> None:
    shipped = "nemo_gym/resources_servers/math/configs/math.yaml"
    assert (INSTALL_ROOT / shipped).is_file()
    cfg = load_global_config([f"+config_paths=[{shipped}]"], cwd=tmp_path, require_complete=False)
    assert cfg.get("math_resources_server.resources_servers.math.verify_workers") == 2
    write(tmp_path / shipped, SERVER.format(kind="local_math", n=1))  # the current directory wins
    assert set(load_global_config([f"+config_paths=[{shipped}]"], cwd=tmp_path).servers()) == {"local_math"}


def test_missing_nested_file_names_the_file_that_lists_it(tmp_path: Path) -> None:
    write(tmp_path / "top.yaml", "config_paths: [nope.yaml]\n")
    with pytest.raises(ConfigError, match=r"config file not found: nope.yaml \(listed in config_paths of top.yaml"):
        load_global_config(["+config_paths=[top.yaml]"], cwd=tmp_path)
    write(tmp_path / "bad.yaml", "config_paths: 3\n")
    with pytest.raises(ConfigError, match=r"config_paths \(bad.yaml\) must be a list of YAML paths, got 3"):
        load_global_config(["+config_paths=[bad.yaml]"], cwd=tmp_path)


def test_inherit_moves_the_source_and_traces_keys_to_it(tmp_path: Path) -> None:
    write(tmp_path / "env.yaml", SERVER.format(kind="generic", n=2))
    write(tmp_path / "bench.yaml", "config_paths: [env.yaml]\nmine:\n  _inherit_from: generic\n"
                                   "  resources_servers:\n    math: {verify_timeout_s: 5}\n")
    cfg = load_global_config(["+config_paths=[bench.yaml]"], cwd=tmp_path)
    assert set(cfg.servers()) == {"mine"}  # _inherit_from moved 'generic' here
    assert cfg.servers()["mine"].settings == {"verify_workers": 2, "verify_timeout_s": 5}
    assert cfg.source_of("mine.resources_servers.math.verify_workers") == "env.yaml:3"
    assert cfg.source_of("mine.resources_servers.math.verify_timeout_s") == "bench.yaml:5"


def test_copy_keeps_the_source(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", SERVER.format(kind="one", n=2) + "two: {_copy: one}\nthree: ${copy:one}\n")
    cfg = load_global_config(["+config_paths=[a.yaml]"], cwd=tmp_path)
    assert {name: spec.settings for name, spec in cfg.servers().items()} == {
        "one": {"verify_workers": 2}, "two": {"verify_workers": 2}, "three": {"verify_workers": 2}}


@pytest.mark.parametrize("text, message", [
    ("mine: {_inherit_from: nowhere}\n", r"'mine' \(a.yaml:1\) inherits from 'nowhere', which is not in the merged"),
    ("a: {_inherit_from: b}\nb: {_inherit_from: a}\n", "inheritance cycle"),
    (SERVER.format(kind="one", n=1) + "two: {_copy: one, _delete_key: nope}\n",
     "_delete_key names 'nope', which 'one' does not have"),
])
def test_bad_directives_are_named(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "a.yaml", text)
    with pytest.raises(ConfigError, match=message):
        load_global_config(["+config_paths=[a.yaml]"], cwd=tmp_path)


@pytest.mark.parametrize("text, message", [
    ("judge:\n  model: big\n", r"section 'judge' \(a.yaml:1\) is neither a server .* nor a known setting"),
    ("srv:\n  resource_servers:\n    math: {}\n",
     r"section 'srv' \(a.yaml:1\): unknown server kind 'resource_servers'; did you mean 'resources_servers'\?"),
    ("srv:\n  _inherit: x\n  resources_servers:\n    math: {}\n",
     r"section 'srv' \(a.yaml:1\) holds 'resources_servers' and also _inherit"),
])
def test_a_section_that_is_no_server_is_an_error_not_dropped(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "a.yaml", text)
    for complete in (True, False):
        with pytest.raises(ConfigError, match=message):
            load_global_config(["+config_paths=[a.yaml]"], cwd=tmp_path, require_complete=complete)


def test_sections_used_by_interpolation_or_known_settings_are_fine(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "defaults: {workers: 3}\nempty: {}\nhead_server: {port: 1234}\n"
                               "responses_create_params: {temperature: 0.5}\nnum_repeats: {_default: 2}\n"
                               "srv:\n  resources_servers:\n    math: {verify_workers: '${defaults.workers}'}\n")
    cfg = load_global_config(["+config_paths=[a.yaml]"], cwd=tmp_path)
    assert cfg.servers()["srv"].settings == {"verify_workers": 3}
