"""Fixtures shared by every test of the repository: tests/ and each server's own tests/ folder under nemo_gym/.
The real vLLM server is started once per test session (its cold start is minutes on CPU)."""

import os
from typing import Iterator

import pytest

from tests.helpers.model import MODEL_NAME, VLLMServer, has_cuda, restore_bundled_weights, vllm_process
from tests.helpers.requirements import REQUIRE_ALL_VAR, MissingRequirement, require_all
from tests.helpers.stack import REPO_ROOT


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A real vLLM OpenAI-compatible server (CPU build) serving the bundled SmolLM2-135M-Instruct.

    Started with weight updates on (dev-mode endpoints, bound to 127.0.0.1), so that the weight-update tests share
    it through `vllm_weights_server` instead of paying a second cold start.
    NEMO_GYM_TEST_VLLM_BASE_URL=http://127.0.0.1:P/v1 reuses a vLLM already serving that model, started with
    VLLM_SERVER_DEV_MODE=1 (development on a small machine); CI never sets it, so there the fixture always starts
    its own.
    """
    external = os.environ.get("NEMO_GYM_TEST_VLLM_BASE_URL")
    if external:
        yield VLLMServer(external.rstrip("/"), MODEL_NAME, 0.0)
        return
    with vllm_process(None, tmp_path_factory.mktemp("vllm") / "vllm.log", enable_weight_updates=True) as server:
        (REPO_ROOT / ".vllm_cold_start_s").write_text(f"{server.cold_start_s:.1f}\n")
        yield server


@pytest.fixture(scope="module")
def vllm_weights_server(vllm_server: VLLMServer) -> Iterator[VLLMServer]:
    """The session's vLLM, for a module that pushes weights into it: given back serving the bundled weights as
    version 0 (prefix cache dropped, generation resumed) whatever the module's tests did, so that no other test ever
    sees weights a weight-update test pushed."""
    yield vllm_server
    restore_bundled_weights(vllm_server)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where CUDA is; elsewhere they are deselected (not skipped), and the summary
    names them."""
    if has_cuda():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]
        config.hook.pytest_deselected(items=gpu)
        config._nemo_gym_gpu_deselected = [item.nodeid for item in gpu]


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under NEMO_GYM_REQUIRE_ALL a skip from anywhere (not only tests.helpers.requirements) fails the test, and so
    does a missing requirement in a test marked xfail (which would otherwise count it as the expected failure)."""
    outcome = yield
    report = outcome.get_result()
    if not require_all():
        return
    if call.excinfo is not None and call.excinfo.errisinstance(MissingRequirement):
        report.outcome = "failed"
        if hasattr(report, "wasxfail"):
            del report.wasxfail
    elif report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, and {REQUIRE_ALL_VAR}=1 allows no skips: {_skip_reason(report)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """Under NEMO_GYM_REQUIRE_ALL a module (or class) skipped while being collected, by
    `pytest.skip(allow_module_level=True)` or `pytest.importorskip`, is a collection error: its tests never ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and require_all():
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped while being collected, and {REQUIRE_ALL_VAR}=1 allows no "
                           f"skips: {_skip_reason(report)}")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    deselected = getattr(config, "_nemo_gym_gpu_deselected", [])
    if deselected:
        terminalreporter.write_sep("=", f"{len(deselected)} test(s) marked gpu deselected: no CUDA device here")
        for nodeid in deselected:
            terminalreporter.write_line(f"DESELECTED (gpu, no CUDA) {nodeid}")
