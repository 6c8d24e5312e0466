"""Agent servers: drive a model server and resources servers through one rollout each."""
