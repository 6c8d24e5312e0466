"""Environments of the experience layer: EnvironmentInterface and the bundled environments."""
