"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad config, checkpoint or environment output: the message names the culprit."""


class NonFiniteError(UserError):
    """The environment produced NaN or Inf observations or rewards, or the training diverged (non-finite parameters,
    or updates skipped one after another for non-finite gradients)."""


class DistributedError(RuntimeError):
    """A collective failed in multi-process training: a peer exited or timed out. The CLI prints it as one line
    and exits with code 1."""
