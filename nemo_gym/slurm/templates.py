"""Find and fill the job script templates (nemo_gym/slurm/job_scripts/, shipped inside the package).

Placeholders are `{{name}}`, so they never clash with the shell's `${VAR}`; every placeholder must get a value.
"""

import re
from pathlib import Path

from nemo_gym.errors import ConfigError

DEFAULT_TEMPLATES_DIR = Path(__file__).resolve().parent / "job_scripts"
COLLECT_TEMPLATE = "collect.sbatch"
AGGREGATE_TEMPLATE = "aggregate.sbatch"
COMMON_FUNCTIONS = "common.sh"

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def read_template(templates_dir: Path, name: str) -> str:
    path = templates_dir / name
    if not path.is_file():
        raise ConfigError(f"job script template not found: {path} (set +slurm.templates_dir=<dir with {name}>)")
    return path.read_text()


def render(template: str, values: dict[str, str]) -> str:
    """`template` with every `{{name}}` replaced by `values[name]`; a placeholder without a value is an error."""
    missing = sorted({m for m in _PLACEHOLDER.findall(template) if m not in values})
    if missing:
        raise ConfigError(f"job script template needs values for: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
