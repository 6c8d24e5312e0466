"""What ng_init_resources_server says to do next works where it was run: the model config is named by a path that
resolves from there (relative inside a checkout, absolute outside one), and a missing pytest is pointed out."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.stack import REPO_ROOT
from tests.scaffold.util import init_environment, ng

MODEL_CONFIG = REPO_ROOT / "configs" / "vllm_model.yaml"


def _hinted_config_paths(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.lstrip().startswith("ng_run")]
    return line.split('"', 2)[1]


def test_outside_a_checkout_the_hint_names_the_model_config_where_it_is(tmp_path: Path) -> None:
    result = init_environment(tmp_path, "+name=my_env")
    config_paths = _hinted_config_paths(result.stdout)
    assert config_paths == f"+config_paths=[resources_servers/my_env/configs/my_env.yaml,{MODEL_CONFIG}]"
    readme = (tmp_path / "resources_servers" / "my_env" / "README.md").read_text()
    assert f'ng_run "{config_paths}"' in readme
    assert "configs/vllm_model.yaml]" not in readme.replace(str(MODEL_CONFIG), "")
    # The hinted command loads from there as written (the model's URL and name as env.yaml would give them).
    printed = ng("run", [config_paths, "+policy_base_url=http://127.0.0.1:9/v1", "+policy_model_name=m",
                         "+print_config=true"], tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "my_env_simple_agent:" in printed.stdout and "base_url: http://127.0.0.1:9/v1" in printed.stdout


def test_inside_a_checkout_the_hint_stays_relative(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    shutil.copy(MODEL_CONFIG, tmp_path / "configs" / "vllm_model.yaml")
    result = init_environment(tmp_path, "+name=my_env")
    assert _hinted_config_paths(result.stdout) == \
        "+config_paths=[resources_servers/my_env/configs/my_env.yaml,configs/vllm_model.yaml]"


def test_a_missing_pytest_is_pointed_out(tmp_path: Path) -> None:
    code = "from nemo_gym.cli.init_resources_server import main; main()"
    without = subprocess.run([sys.executable, "-c", code, "+name=my_env"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert without.returncode == 0, without.stderr
    assert "(there is no pytest on PATH: pip install pytest, or nemo_gym's dev extra)" in without.stdout
    with_pytest = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # the venv has pytest
    found = subprocess.run([sys.executable, "-c", code, "+name=other"], cwd=tmp_path, env=with_pytest,
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and "no pytest" not in found.stdout
