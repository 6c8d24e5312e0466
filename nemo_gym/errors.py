"""User-facing errors, in two families that the command-line tools tell apart by exit status.

Every error a user can cause by input (config, data, command line) is a `NemoGymError`: the CLI prints its message
as one line and exits 2 (fix the command; running it again as it is cannot help). Every failure of something the
input did not cause (a server, the network, an external tool) is a `DownstreamError`: one line and exit 1 (the same
command may succeed later). A `RetryLaterError` is one that said when: a service that will not serve for a while (a
model endpoint's spent quota); exit 75 (sysexits' EX_TEMPFAIL), so a script can wait and run the same command again.
`RolloutFailedError` is what the Python API raises for a rollout the infrastructure could not complete.
"""


def one_line(text: object) -> str:
    """Collapse a multi-line message (e.g. PyYAML's) so a CLI error stays one line."""
    return " ".join(str(text).split())


class NemoGymError(Exception):
    """An error caused by the user's input, with a message that says what to fix."""


class ConfigError(NemoGymError):
    """The merged configuration is invalid (missing value, bad reference, unknown key...)."""


class InputDataError(NemoGymError):
    """An input JSONL file is malformed or a row is invalid."""


class DownstreamError(Exception):
    """A server, the network or an external tool failed; the user's input may be fine."""


class RetryLaterError(DownstreamError):
    """A downstream service refuses to serve for a while (a spent quota): the same command succeeds once it does."""


class RolloutFailedError(DownstreamError):
    """A rollout still failed after its attempts; raised by the Python API instead of ever inventing a result.

    Not a `NemoGymError`: the input may be fine, the infrastructure (agent, model, environment) failed. The
    attributes say what failed and where; the same fields the CLI writes to `<stem>_failures.jsonl`.
    """

    def __init__(self, *, failure_class: str, attempts: int, last_error: str, http_status: int | None, url: str,
                 task_index: int | None, rollout_index: int | None) -> None:
        where = "a row without _ng_task_index" if task_index is None else f"task {task_index}"
        if rollout_index is not None:
            where += f", rollout {rollout_index}"
        super().__init__(f"rollout of {where} failed after {attempts} attempt(s) at {url} "
                         f"({failure_class}): {last_error}")
        self.failure_class = failure_class
        self.attempts = attempts
        self.last_error = last_error
        self.http_status = http_status
        self.url = url
        self.task_index = task_index
        self.rollout_index = rollout_index
