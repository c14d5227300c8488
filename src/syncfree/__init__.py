"""syncfree: PPO for massively parallel environments, with no host syncs in the hot loop.

`syncfree.learn(task, **overrides)` trains from Python (`syncfree.api`); `syncfree train` from the command line.
`syncfree.tune(task, trials=N, ...)` searches a task's settings with Optuna (`syncfree.tuning`), as `syncfree tune`.
`syncfree.load(checkpoint)` gives a checkpoint's policy, config and env factory; `syncfree.evaluate(...)` plays it.
`syncfree.check_env(env)` checks your own env against what it declares (`syncfree.envs.check`).
"""

__version__ = "0.2.0"


def __getattr__(name: str):
    if name in ("learn", "TrainResult", "load", "evaluate", "load_policy"):  # imported on first use: `import syncfree` stays light
        from syncfree import api

        return getattr(api, name)
    if name in ("tune", "TuneResult"):
        from syncfree import tuning

        return getattr(tuning, name)
    if name == "check_env":
        from syncfree.envs.check import check_env

        return check_env
    raise AttributeError(f"module 'syncfree' has no attribute {name!r}")
