"""Model servers: the OpenAI Responses API in front of vLLM or any OpenAI-compatible endpoint."""
