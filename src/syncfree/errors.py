"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

import contextlib
import re
import signal
from collections.abc import Iterator

INTERRUPTED = 130
"""Exit code of a run stopped by a signal without saving (128 + SIGINT)."""

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals that stop training after its current iteration, which is saved: Ctrl-C, SIGTERM (`timeout`, SLURM,
Kubernetes) and SIGHUP (the terminal or the SSH session that started it closed)."""


def stop_signals() -> list[int]:
    """The `STOP_SIGNALS` this process handles: SIGHUP not where it was started ignoring it (`nohup`: the run is to
    outlive its terminal)."""
    hangup = getattr(signal, "SIGHUP", None)
    return [s for s in STOP_SIGNALS if s != hangup or signal.getsignal(s) != signal.SIG_IGN]


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


DEFAULT_MEMORY_ADVICE = "lower env.num_envs (or ppo.steps_per_env)"
"""What an out-of-memory line advises when no `allocating` block named the setting behind the allocation."""
ENV_MEMORY = "lower env.num_envs (the envs; a task's env options, such as a map's size, count too)"
POLICY_MEMORY = "lower the policy's layer sizes (policy.actor_hidden, policy.critic_hidden, or its token or recurrent sizes)"
STORAGE_MEMORY = "lower env.num_envs or ppo.steps_per_env (the rollout storage holds steps x envs)"
UPDATE_MEMORY = "raise ppo.num_minibatches (smaller minibatches), or lower env.num_envs or ppo.steps_per_env"
EVAL_MEMORY = "lower callbacks.eval_envs (the evaluation's envs)"
RND_MEMORY = ("lower rnd.predictor_hidden, rnd.target_hidden or rnd.num_outputs (random network distillation's "
              "networks)")


def is_out_of_memory(error: BaseException) -> bool:
    """A failed allocation: Python's `MemoryError`, torch's `OutOfMemoryError`, or the CPU allocator's error."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or \
        "can't allocate memory" in str(error)


@contextlib.contextmanager
def allocating(advice: str) -> Iterator[None]:
    """Work whose memory a setting drives: an out-of-memory error raised inside carries `advice` (what to lower,
    by its setting's name) to the line `out_of_memory` makes of it; the innermost block names it."""
    try:
        yield
    except (MemoryError, RuntimeError) as e:
        if is_out_of_memory(e) and not hasattr(e, "memory_advice"):
            e.memory_advice = advice  # type: ignore[union-attr]  # read by `out_of_memory`
        raise


def out_of_memory(error: BaseException) -> str | None:
    """One line for an allocation that failed (the config asks for more memory than there is), naming the setting
    that drove it where an `allocating` block said so, else None."""
    if not is_out_of_memory(error):
        return None
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    tried = re.search(r"tried to allocate (\d+) bytes", text)
    what = f"an allocation of {int(tried.group(1)) / 2**30:.1f} GiB failed" if tried else first
    return f"out of memory: {what}; {getattr(error, 'memory_advice', DEFAULT_MEMORY_ADVICE)}"
