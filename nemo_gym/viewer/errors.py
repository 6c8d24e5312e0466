"""The viewer's errors: bad options or data are `ViewerError`s (one line on the CLI, a 400 page in the browser)."""

from nemo_gym.errors import NemoGymError


class ViewerError(NemoGymError):
    """An option, query parameter or rollout file the viewer cannot use; the message says which and why."""


class NotFound(ViewerError):
    """A run, task or rollout that the opened files do not hold."""
