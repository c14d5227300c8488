"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

import re

INTERRUPTED = 130
"""Exit code of a run stopped by a signal without saving (128 + SIGINT)."""


class UserError(Exception):
    """Bad config, checkpoint or environment output: the message names the culprit."""


class NonFiniteError(UserError):
    """The environment produced NaN or Inf observations or rewards, or the training diverged (non-finite parameters,
    or updates skipped one after another for non-finite gradients)."""


class DistributedError(RuntimeError):
    """A collective failed in multi-process training: a peer exited or timed out. The CLI prints it as one line
    and exits with code 1."""


def check(ok: bool, key: str, allowed: str, value: object) -> None:
    """A config value's check: one line naming the key, its value and what is allowed, when `ok` is false."""
    if not ok:
        raise UserError(f"config: {key}={value!r} is invalid; allowed: {allowed}")


def out_of_memory(error: BaseException) -> str | None:
    """One line for an allocation that failed (the config asks for more memory than there is), else None."""
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or "can't allocate memory" in text:
        tried = re.search(r"tried to allocate (\d+) bytes", text)
        what = f"an allocation of {int(tried.group(1)) / 2**30:.1f} GiB failed" if tried else first
        return f"out of memory: {what}; lower env.num_envs (or ppo.steps_per_env)"
    return None
