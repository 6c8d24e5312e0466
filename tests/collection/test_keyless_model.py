"""A keyless local or self-hosted model server (a vLLM of one's own) needs no `policy_api_key`: the model configs load
without it, send no Authorization header, and a run against such a server collects."""

from pathlib import Path

import orjson

from nemo_gym.config import load_global_config
from nemo_gym.server.supervisor import free_port
from tests.collection.util import run_cli
from tests.helpers.stack import REPO_ROOT, environment_config
from tests.slurm.util import instant_model

MATH = environment_config("math")
MODEL_CONFIGS = ("configs/vllm_model.yaml", "configs/openai_model.yaml")


def _api_key(tmp_path: Path, model_config: str, *extra: str) -> object:
    args = [f"+config_paths=[{MATH},{REPO_ROOT / model_config}]", "+policy_base_url=http://127.0.0.1:9/v1",
            "+policy_model_name=m", *extra]
    (implementation,) = load_global_config(args, cwd=tmp_path).values["policy_model"]["responses_api_models"].values()
    return implementation["api_key"]


def test_model_configs_load_without_a_key_and_take_one_when_given(tmp_path: Path) -> None:
    for model_config in MODEL_CONFIGS:
        assert _api_key(tmp_path, model_config) is None, model_config
        assert _api_key(tmp_path, model_config, "+policy_api_key=sk-1") == "sk-1"
    (tmp_path / "env.yaml").write_text("policy_api_key: sk-from-env\n")
    assert _api_key(tmp_path, "configs/vllm_model.yaml") == "sk-from-env"


def test_a_run_against_a_keyless_server_collects_with_no_key_anywhere(tmp_path: Path) -> None:
    with instant_model() as base_url:
        args = [f"+config_paths=[{MATH},{REPO_ROOT / 'configs' / 'vllm_model.yaml'}]", f"+policy_base_url={base_url}",
                "+policy_model_name=instant-stub", f"+head_server.port={free_port()}", "+split=example", "+limit=4",
                f"+output_jsonl_fpath={tmp_path}/out/keyless.jsonl", f"+log_dir={tmp_path}/logs"]
        result = run_cli("e2e", args, REPO_ROOT)  # the math config's dataset path is relative to the checkout
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [orjson.loads(line) for line in (tmp_path / "out" / "keyless.jsonl").read_bytes().splitlines()]
    assert len(rows) == 4 and all(row["reward"] in (0.0, 1.0) for row in rows)
