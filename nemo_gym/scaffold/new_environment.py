"""Write a new environment folder (app, config, example data, tests, README) from the `.tmpl` templates.

The templates carry a `.tmpl` suffix so that neither pytest nor an import ever mistakes them for a real test or
server; `string.Template` fills in `$name`, `$class_name`, `$env_dir`, `$run_dir_from_tests` and `$model_config`.
"""

import keyword
import os
import re
import shutil
import tempfile
from pathlib import Path
from string import Template

import nemo_gym.resources_servers
from nemo_gym.config.loader import INSTALL_ROOT
from nemo_gym.errors import NemoGymError

TEMPLATES = Path(__file__).parent / "templates"
MODEL_CONFIG = Path("configs") / "vllm_model.yaml"
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
BUILT_IN_ENVIRONMENTS = Path(nemo_gym.resources_servers.__file__).parent


class ScaffoldError(NemoGymError):
    """The new environment cannot be created as asked (bad name, folder already there)."""


def _layout(name: str) -> dict[str, str]:
    """Template file -> its path inside the new environment folder."""
    return {
        "app.py.tmpl": "app.py",
        "config.yaml.tmpl": f"configs/{name}.yaml",
        "example.jsonl.tmpl": "data/example.jsonl",
        "test_environment.py.tmpl": f"tests/test_{name}.py",  # a unique basename: pytest imports test files by it
        "scripted_model.py.tmpl": "tests/scripted_model.py",
        "scripted_model.yaml.tmpl": "tests/scripted_model.yaml",
        "README.md.tmpl": "README.md",
    }


def validate_name(name: object) -> str:
    """The environment name, checked: it names the folder, the config instances and the server class."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"+name={name!r} must be a Python identifier starting with a letter "
                            "(letters, digits, underscores), e.g. +name=my_env")
    if (BUILT_IN_ENVIRONMENTS / name).is_dir():
        raise ScaffoldError(f"+name={name}: nemo_gym already has an environment named '{name}' "
                            f"({BUILT_IN_ENVIRONMENTS / name}); pick another name")
    return name


def class_name(name: str) -> str:
    """`my_env` -> `MyEnv`."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def model_config_path(run_dir: Path) -> str:
    """nemo_gym's configs/vllm_model.yaml as a path that works from `run_dir`: relative where it is under `run_dir`
    (a checkout), else absolute where the config loader finds it (the checkout nemo_gym is installed from)."""
    for candidate in (run_dir / MODEL_CONFIG, INSTALL_ROOT / MODEL_CONFIG):
        if candidate.is_file():
            return candidate.relative_to(run_dir).as_posix() if candidate.is_relative_to(run_dir) else str(candidate)
    return MODEL_CONFIG.as_posix()  # an install without the checkout's configs/: the README says where it comes from


def render(name: str, env_dir: Path, run_dir: Path) -> dict[str, str]:
    """Relative path -> content of every file of the new environment `env_dir`, whose commands run in `run_dir`."""
    env_dir, run_dir = env_dir.resolve(), run_dir.resolve()
    values = {
        "name": name,
        "class_name": class_name(name),
        "env_dir": Path(os.path.relpath(env_dir, run_dir)).as_posix(),
        "run_dir_from_tests": Path(os.path.relpath(run_dir, env_dir / "tests")).as_posix(),
        "model_config": model_config_path(run_dir),
    }
    return {target: Template((TEMPLATES / template).read_text()).substitute(values)
            for template, target in _layout(name).items()}


def create_environment(name: str, output_dir: Path, run_dir: Path) -> Path:
    """Create `output_dir/name/` and return it; refuses to touch an existing path.

    The files are written into a temporary sibling folder that is renamed into place at the end, so a failure
    leaves nothing half-made behind.
    """
    name = validate_name(name)
    env_dir = output_dir / name
    if env_dir.exists() or env_dir.is_symlink():
        raise ScaffoldError(f"{env_dir} already exists; refusing to overwrite it (pick another +name or +output_dir)")
    if output_dir.exists() and not output_dir.is_dir():
        raise ScaffoldError(f"+output_dir={output_dir} is a file, not a folder")
    files = render(name, env_dir, run_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=output_dir))
    except OSError as exc:
        raise ScaffoldError(f"cannot create {env_dir}: {exc.strerror}") from None
    try:
        for relative, content in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp made it private; give it the mode a plain mkdir would
        os.rename(staging, env_dir)  # a folder with files that appeared meanwhile makes this fail, never merge
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return env_dir
