"""docs/configuration.md lists every option of every command and every setting of every server implementation,
exactly as the typed settings define them."""

import importlib.util

from tests.helpers.stack import REPO_ROOT

DOC = REPO_ROOT / "docs" / "configuration.md"


def _generator():
    spec = importlib.util.spec_from_file_location("write_config_docs", REPO_ROOT / "scripts" / "write_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_and_server_has_its_generated_block() -> None:
    generator = _generator()
    blocks = generator.generated()
    text = DOC.read_text()
    assert set(blocks) == set(generator.block_names(text)), "add a BEGIN/END generated block per command and server"


def test_tables_match_the_typed_settings() -> None:
    generator = _generator()
    text = DOC.read_text()
    assert generator.render(text, generator.generated()) == text, (
        "docs/configuration.md is out of date: run PYTHONPATH=. python scripts/write_config_docs.py")
