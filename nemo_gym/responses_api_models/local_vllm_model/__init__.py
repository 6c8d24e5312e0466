"""A vllm_model server that starts and owns its own vLLM subprocess."""
