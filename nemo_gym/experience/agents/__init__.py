"""The bridge to the agent servers: a trainer's settings out as a row's create params (`params`), the agent's
rollout back as a token-level Completion (`results`). `rollout_manager.AsyncNemoGymRolloutImpl` uses both."""
