"""Example environment: one `get_weather` tool; the reward checks that the model called it for the right city."""
