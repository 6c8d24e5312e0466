"""The shell commands of the README and the guides (docs/recipes.md, docs/environments.md) run as written, so a doc
command that breaks fails CI. Every ```bash block of those pages is either run by a test here (RUN) or listed in
NOT_RUN with the reason (it needs a GPU or the network, or another test runs it); a new block must go in one of the
two, and nothing is skipped.

Where the docs point at a model server, the tests give it a real one: the README's own `ng_serve_vllm` (a vLLM cold
start, the one test here that starts a vLLM), or the session's vLLM as the URL of the hosted-model recipe and in
`env.yaml` (where the docs say the model's URL and name go)."""

from pathlib import Path

import orjson
import pytest

from tests.docs.doc_blocks import DocBlock, bash_blocks
from tests.docs.doc_shell import DocShell, checkout_like
from tests.helpers.model import MODEL_NAME, VLLMServer
from tests.helpers.stack import REPO_ROOT, free_port

PAGES = ("README.md", "docs/recipes.md", "docs/environments.md")
README_OWN_MODEL = ("README.md", "Your own model, data and environment", 0)
HOSTED_RECIPE = ("docs/recipes.md", "A hosted OpenAI-compatible model", 0)
NEW_ENVIRONMENT = ("docs/environments.md", "Starting a new environment", 0)
NUMBER_GUESS = ("docs/environments.md", "A multi-turn environment: the number-guessing game", 0)
RUN = {README_OWN_MODEL, HOSTED_RECIPE, NEW_ENVIRONMENT, NUMBER_GUESS}
MAIN_JOB = ("the main job (scripts/main.sh: setup, then this ng_e2e_collect_rollouts command, a vLLM cold start and 50 "
            "rollouts) runs in tests/install/test_pip_install.py::test_pip_install_vllm_extra_into_a_clean_venv_runs_"
            "the_main_job; scripts/test.sh is this test suite itself (.ci/run runs it)")
NOT_RUN = {
    ("README.md", "Two commands", 0): MAIN_JOB,
    ("README.md", "Two commands", 1): MAIN_JOB,
    ("README.md", "Into your own environment", 0): "needs the network: pip installs from PyPI",
    ("docs/recipes.md", "Your own model on a GPU", 0): "needs a GPU (and a checkpoint of one's own)",
    ("docs/recipes.md", "Uploading rollouts to Weights & Biases", 0): "needs the network: pip install, wandb login",
}


def _block(key: tuple[str, str, int]) -> DocBlock:
    return next(block for block in bash_blocks(REPO_ROOT, key[0]) if block.key == key)


def _rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _env_yaml(workdir: Path, server: VLLMServer) -> None:
    """What the docs tell the reader to put in env.yaml: the model server's URL and served name (no key)."""
    (workdir / "env.yaml").write_text(f"policy_base_url: {server.base_url}\npolicy_model_name: {server.model}\n")


def test_every_block_is_run_or_says_why_it_is_not() -> None:
    keys = [block.key for page in PAGES for block in bash_blocks(REPO_ROOT, page)]
    assert len(keys) == len(set(keys))
    assert not RUN & set(NOT_RUN)
    assert set(keys) == RUN | set(NOT_RUN), "a new ```bash block: run it here, or say in NOT_RUN why not"


@pytest.mark.vllm
def test_readme_own_model_serve_run_and_collect(tmp_path: Path) -> None:
    port = free_port()
    shell = DocShell(checkout_like(tmp_path / "work"), free_port(),
                     {"+port=8000": f"+port={port}", "127.0.0.1:8000": f"127.0.0.1:{port}"})
    shell.run(_block(README_OWN_MODEL))
    (serve,) = [out for command, out in shell.outputs.items() if command.startswith("ng_serve_vllm")]
    assert f"vLLM serves '{MODEL_NAME}' at http://127.0.0.1:{port}/v1" in serve
    rows = _rows(shell.workdir / "results" / "math.jsonl")
    assert len(rows) == 10 * 4 and {row["agent_ref"]["name"] for row in rows} == {"math_simple_agent"}
    (collect,) = [out for command, out in shell.outputs.items() if command.startswith("ng_collect_rollouts")]
    assert "report: results/math_report.html" in collect and (shell.workdir / "results/math_report.html").is_file()


@pytest.mark.vllm
def test_hosted_model_recipe_against_a_keyless_server(vllm_server: VLLMServer, tmp_path: Path) -> None:
    shell = DocShell(checkout_like(tmp_path / "work"), free_port(),
                     {"https://api.example.com/v1": vllm_server.base_url, "<served model name>": vllm_server.model})
    shell.run(_block(HOSTED_RECIPE))
    assert len(_rows(shell.workdir / "results" / "hosted.jsonl")) == 50  # the math example split, one rollout each


@pytest.mark.vllm
@pytest.mark.parametrize("key, output, rows", [(NEW_ENVIRONMENT, "my_env_rollouts.jsonl", 5),
                                               (NUMBER_GUESS, "games.jsonl", 5)], ids=["new_environment", "game"])
def test_environment_guide_blocks_with_the_model_in_env_yaml(vllm_server: VLLMServer, tmp_path: Path,
                                                             key: tuple[str, str, int], output: str, rows: int) -> None:
    shell = DocShell(checkout_like(tmp_path / "work"), free_port())
    _env_yaml(shell.workdir, vllm_server)
    shell.run(_block(key))
    assert len(_rows(shell.workdir / "results" / output)) == rows
