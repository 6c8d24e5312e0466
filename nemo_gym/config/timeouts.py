"""Every timeout default of a rollout's path, each defined once, and the rule that they nest.

A rollout's timeouts nest, each inner one no longer than the one around it (docs/architecture.md, "Retry budget"):

    model request (a model server -> vLLM or a hosted API)  <=  the agent's model call  <=  one rollout attempt
    <=  the prompt group (the trajectory collector)

An inner timeout longer than its outer one never fires: the outer one cancels the call first, and the inner call
goes on, unobserved, holding a model's slot. `check_nested` refuses such a config when it loads
(nemo_gym.server.settings_check for ng_run and ng_e2e_collect_rollouts); under the trajectory collector a rollout
attempt takes the group's timeout when that is shorter (`RolloutCollectionHelper.for_prompt_groups`), so that pair
nests by construction.
"""

from dataclasses import dataclass

from nemo_gym.errors import ConfigError

CONNECT_TIMEOUT_S = 5.0  # connecting to another server
READ_TIMEOUT_S = 600.0  # another server's answer, for a call without a timeout of its own
MODEL_REQUEST_TIMEOUT_S = 600.0  # one request to a model endpoint (vLLM, a hosted API) by a model server or a trainer
MODEL_CALL_TIMEOUT_S = 600.0  # an agent's call to its model server (one turn)
RESOURCES_CALL_TIMEOUT_S = 300.0  # an agent's call to its resources server (seed_session, a tool, verify)
ROLLOUT_TIMEOUT_S = 1800.0  # one rollout attempt, one /run call to its agent (ng_collect_rollouts, the helper)
GROUP_TIMEOUT_S = 600.0  # one attempt of a prompt group (the trajectory collector)
VERIFY_TIMEOUT_S = 600.0  # one /verify call of ng_reverify_rollouts
WEIGHT_UPDATE_TIMEOUT_S = 300.0  # one replica's pause + load + relabel of a weight update, and its transfer group

# How long a process is given to stop after SIGTERM before its group is killed (nemo_gym.server.process_group).
SERVER_STOP_GRACE_S = 10.0  # a server ng_run started
# The vLLM of local_vllm_model: within its server's grace, so that the server stops it rather than orphans it.
LOCAL_VLLM_STOP_GRACE_S = SERVER_STOP_GRACE_S - 2.0
SERVE_VLLM_STOP_GRACE_S = 15.0  # the vLLM ng_serve_vllm started (a large model's engine takes a while)
NG_RUN_STOP_GRACE_S = 30.0  # ng_run as a whole, started by another command: its servers' grace, and its own

# The settings that hold them, where the nesting check reads them.
MODEL_REQUEST_KEY = "request_timeout_s"
MODEL_CALL_KEY = "model_timeout_s"
ROLLOUT_KEY = "rollout_timeout_s"


class TimeoutNestingError(ConfigError):
    """An inner timeout is longer than the one around it."""


@dataclass(frozen=True)
class Timeout:
    """One timeout of a config: the dotted key that holds it, its seconds, and where it was set (None: the
    default)."""

    key: str
    seconds: float
    where: str | None = None

    def describe(self) -> str:
        return f"{self.key} = {self.seconds:g} s ({self.where or 'the default'})"


def check_nested(inner: Timeout, outer: Timeout) -> None:
    """Refuse `inner` longer than `outer`, the timeout of the call that waits for it."""
    if inner.seconds > outer.seconds:
        raise TimeoutNestingError(
            f"{inner.describe()} is longer than {outer.describe()}, which waits for it: timeouts nest, each inner one "
            f"no longer than the one around it (docs/architecture.md, \"Retry budget\"); lower {inner.key} or raise "
            f"{outer.key}")
