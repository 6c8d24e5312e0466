"""The simple agent: a model/tool loop between seed_session and verify."""
