"""Responses API pass-through to an OpenAI-compatible endpoint."""
