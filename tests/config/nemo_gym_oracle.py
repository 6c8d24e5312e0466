"""Run with NeMo Gym 0.4.0's Python (.venv-nemo-gym): its own config parser on each case, as JSON on stdout.

    python -I nemo_gym_oracle.py '{"case": ["a.yaml", "b.yaml"], ...}' WORKDIR '{"policy_base_url": ...}'

Prints {case: {server name: server section} or "ERROR <type>: <message>"}.
"""

import contextlib
import io
import json
import os
import sys

from nemo_gym.global_config import GlobalConfigDictParser
from omegaconf import DictConfig, OmegaConf

KINDS = {"responses_api_models", "resources_servers", "responses_api_agents"}


def main() -> None:
    cases, workdir, extra = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    os.chdir(workdir)
    out = {}
    for name, paths in cases.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                cfg = GlobalConfigDictParser().parse_no_environment(
                    initial_global_config_dict=DictConfig({"config_paths": paths, **extra}))
            values = OmegaConf.to_container(cfg, resolve=True)
            out[name] = {k: v for k, v in values.items() if isinstance(v, dict) and set(v) & KINDS}
        except Exception as exc:  # noqa: BLE001 - every failure is part of the answer
            out[name] = f"ERROR {type(exc).__name__}: {str(exc)[:300]}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
