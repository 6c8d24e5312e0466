"""User-facing errors.

Every error a user can cause by input (config, data, command line) is a `NemoGymError`: the CLI prints its message
as one line and exits non-zero instead of showing a traceback.
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
