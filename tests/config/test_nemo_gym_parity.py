"""NeMo Gym configs load here exactly as NeMo Gym 0.4.0 loads them: its own parser is the oracle.

Every benchmark config shipped in NeMo Gym's installed package (nested `config_paths`, `_inherit_from`, `_copy`,
`_delete_key`) and our fixture chain are parsed by NeMo Gym (in .venv-nemo-gym) and by our loader; the servers and
their settings must be identical, and a config NeMo Gym refuses must be refused here too.
"""

import json
import subprocess
from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError
from tests.helpers.nemo_gym_reference import reference_env, reference_python, site_packages

ORACLE = Path(__file__).with_name("nemo_gym_oracle.py")
FIXTURES = Path(__file__).with_name("fixtures")
MODEL = "responses_api_models/openai_model/configs/openai_model.yaml"
POLICY = {"policy_base_url": "http://127.0.0.1:9/v1", "policy_api_key": "k", "policy_model_name": "m"}


def _oracle(cases: dict[str, list[str]], workdir: Path) -> dict:
    done = subprocess.run([str(reference_python()), "-I", str(ORACLE), json.dumps(cases), str(workdir),
                           json.dumps(POLICY)], capture_output=True, text=True, timeout=600, cwd=workdir,
                          env=reference_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _without_ports(servers: dict) -> dict:
    """NeMo Gym fills in host and port while parsing; ng_run does it when it starts the servers."""
    for section in servers.values():
        for implementations in section.values():
            for settings in implementations.values():
                settings.pop("host", None)
                settings.pop("port", None)
    return servers


def _ours(paths: list[str], workdir: Path) -> dict:
    config = load_global_config([f"+config_paths=[{','.join(paths)}]", *(f"+{k}={v}" for k, v in POLICY.items())],
                                cwd=workdir)
    return {name: {s.kind: {s.implementation: s.settings}} for name, s in config.servers().items()}


@pytest.fixture(scope="module")
def shipped() -> tuple[Path, dict[str, list[str]], dict]:
    root = site_packages()
    cases = {str(p.relative_to(root)): [str(p.relative_to(root)), MODEL]
             for p in sorted((root / "benchmarks").rglob("*.yaml"))}
    return root, cases, _oracle(cases, root)


def test_every_shipped_benchmark_config_loads_as_in_nemo_gym(shipped: tuple[Path, dict, dict]) -> None:
    root, cases, expected = shipped
    accepted = {name: servers for name, servers in expected.items() if isinstance(servers, dict)}
    # The comparison must cover the features: nested chains and inheritance, not just flat files.
    texts = {name: (root / name).read_text() for name in accepted}
    assert len(accepted) >= 100
    assert sum("_inherit_from" in t for t in texts.values()) >= 50
    assert sum("config_paths" in t for t in texts.values()) >= 50
    mismatched = [name for name, servers in accepted.items() if _ours(cases[name], root) != _without_ports(servers)]
    assert mismatched == []


def test_configs_nemo_gym_refuses_are_refused(shipped: tuple[Path, dict, dict]) -> None:
    root, cases, expected = shipped
    refused = [name for name, servers in expected.items() if isinstance(servers, str)]
    assert refused, "expected NeMo Gym to refuse some shipped configs (missing values, bad references)"
    for name in refused:
        with pytest.raises(ConfigError):
            _ours(cases[name], root)


def test_fixture_chain_loads_as_in_nemo_gym() -> None:
    """Our own three-level chain: nested config_paths (one listed twice), _inherit_from, ${copy:}, _copy with
    _delete_key."""
    expected = _oracle({"bench": ["bench/config.yaml"]}, FIXTURES)["bench"]
    assert isinstance(expected, dict), expected
    ours = _ours(["bench/config.yaml"], FIXTURES)
    assert ours == _without_ports(expected)
    assert set(ours) == {"bench_math_server", "bench_agent", "policy_model", "judge_model"}
    agent = ours["bench_agent"]["responses_api_agents"]["simple_agent"]
    assert agent["max_steps"] == 4 and agent["resources_server"]["name"] == "bench_math_server"
    assert ours["judge_model"] == {"responses_api_models": {"openai_model": {"base_url": "http://127.0.0.1:9/v1",
                                                                             "model": "judge"}}}
