"""Console scripts. Each parses Hydra-style overrides from argv and turns user errors into one-line messages."""
