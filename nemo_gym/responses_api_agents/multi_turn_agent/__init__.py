"""The multi-turn agent: model turns alternating with the steps of a turn-based environment."""
