"""local_vllm_model: one `ng_run` starts vLLM itself, waits out its cold start, and serves through it."""

from pathlib import Path

import httpx
import psutil
import pytest

from nemo_gym import protocol
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, running_stack


@pytest.mark.vllm
def test_local_vllm_model_serves_and_stops_vllm(tmp_path: Path) -> None:
    settings = "+policy_model.responses_api_models.local_vllm_model"
    args = [f"+config_paths=[{REPO_ROOT / 'configs' / 'local_vllm_model.yaml'}]", f"{settings}.model_path={MODEL_DIR}",
            # Eager mode halves the CPU cold start (notes/vllm_findings.md).
            f"{settings}.vllm_args=[--enforce-eager,--enable-auto-tool-choice,--tool-call-parser,pythonic]"]
    with running_stack(args, tmp_path, timeout_s=900) as stack:
        url = stack.url("policy_model")
        # Started as local_vllm_model's launcher (vllm_main), which vLLM may retitle as its API server.
        vllm = [p for p in psutil.Process(stack.popen.pid).children(recursive=True)
                if any(name in " ".join(p.cmdline())
                       for name in ("local_vllm_model.vllm_main", "vllm.entrypoints.openai.api_server"))]
        assert len(vllm) == 1
        body = {"input": "What is 2 + 3?", "temperature": 0.0, "max_output_tokens": 16,
                protocol.RETURN_TOKENS_PARAM: True}
        response = httpx.post(f"{url}/v1/responses", json=body, timeout=120, trust_env=False).json()
        assert "5" in protocol.output_text(response)
        assert protocol.token_info(response["output"][-1])["generation_token_ids"]
    assert not vllm[0].is_running() or vllm[0].status() == psutil.STATUS_ZOMBIE
