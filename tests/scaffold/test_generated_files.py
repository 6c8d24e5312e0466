"""What ng_init_resources_server writes: the files, their names, and paths that resolve from where ng_* runs."""

import os
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import orjson
import pytest
import yaml

from nemo_gym.scaffold.new_environment import TEMPLATES, class_name, render
from tests.scaffold.util import init_environment

FILES = ["README.md", "app.py", "configs/{n}.yaml", "data/example.jsonl", "tests/scripted_model.py",
         "tests/scripted_model.yaml", "tests/test_{n}.py"]


def test_creates_the_environment_folder_under_resources_servers(tmp_path: Path) -> None:
    result = init_environment(tmp_path, "+name=my_env")
    env_dir = tmp_path / "resources_servers" / "my_env"
    assert sorted(str(p.relative_to(env_dir)) for p in env_dir.rglob("*") if p.is_file()) == \
        sorted(f.format(n="my_env") for f in FILES)
    assert [p.name for p in (tmp_path / "resources_servers").iterdir()] == ["my_env"]  # no staging folder left
    assert result.stdout.startswith("created resources_servers/my_env/")
    # Outside a checkout, the model config is named where it is (tests/scaffold/test_next_hints.py).
    assert 'ng_run "+config_paths=[resources_servers/my_env/configs/my_env.yaml,' in result.stdout


@pytest.mark.parametrize("name, expected", [("my_env", "MyEnv"), ("Env2", "Env2"), ("a", "A"),
                                            ("word_count_3", "WordCount3"), ("myEnv", "MyEnv")])
def test_every_file_is_valid_for_any_name(tmp_path: Path, name: str, expected: str) -> None:
    assert class_name(name) == expected
    files = render(name, tmp_path / "resources_servers" / name, tmp_path)
    for path, text in files.items():
        if path.endswith(".py"):
            compile(text, path, "exec")
        elif path.endswith(".yaml"):
            assert isinstance(yaml.safe_load(text), dict)
        elif path.endswith(".jsonl"):
            assert all(orjson.loads(line)["expected_answer"] for line in text.splitlines())
    assert f"class {expected}(ResourcesServer):" in files["app.py"]
    assert f"_app().{expected}(ServerSpec(" in files[f"tests/test_{name}.py"]


@pytest.mark.parametrize("run, output_dir", [("", None), ("", "envs/nested"), ("run", "../elsewhere")])
def test_config_paths_resolve_from_the_directory_the_commands_run_in(tmp_path: Path, run: str,
                                                                     output_dir: str | None) -> None:
    run_dir = tmp_path / run
    run_dir.mkdir(exist_ok=True)
    init_environment(run_dir, "+name=my_env", *([f"+output_dir={output_dir}"] if output_dir else []))
    env_dir = (run_dir / (output_dir or "resources_servers") / "my_env").resolve()
    config = yaml.safe_load((env_dir / "configs" / "my_env.yaml").read_text())
    entrypoint = config["my_env_resources_server"]["resources_servers"]["my_env"]["entrypoint"]
    dataset = config["my_env_simple_agent"]["responses_api_agents"]["simple_agent"]["datasets"][0]
    assert (run_dir / entrypoint).resolve() == env_dir / "app.py"
    assert (run_dir / dataset["jsonl_fpath"]).resolve() == env_dir / "data" / "example.jsonl"
    model = yaml.safe_load((env_dir / "tests" / "scripted_model.yaml").read_text())
    assert (run_dir / model["policy_model"]["responses_api_models"]["scripted_model"]["entrypoint"]).resolve() == \
        env_dir / "tests" / "scripted_model.py"
    test_text = (env_dir / "tests" / "test_my_env.py").read_text()
    relative = os.path.relpath(run_dir, env_dir / "tests")
    assert f'RUN_DIR = (TESTS_DIR / "{relative}").resolve()' in test_text
    assert (env_dir / "tests" / relative).resolve() == run_dir.resolve()


def test_templates_are_no_tests_or_servers_and_are_package_data() -> None:
    templates = sorted(p.name for p in TEMPLATES.iterdir())
    assert templates and all(name.endswith(".tmpl") for name in templates)  # pytest and imports skip them
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["nemo_gym.scaffold"]
    assert all(any(fnmatch(f"templates/{name}", glob) for glob in globs) for name in templates)
