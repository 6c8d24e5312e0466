"""Responses API model server backed by one or more vLLM (Chat Completions) replicas."""
