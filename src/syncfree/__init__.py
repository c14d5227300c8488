"""syncfree: PPO for massively parallel environments, with no host syncs in the hot loop.

`syncfree.learn(task, **overrides)` trains from Python (`syncfree.api`); `syncfree train` from the command line.
"""

__version__ = "0.2.0"


def __getattr__(name: str):
    if name in ("learn", "TrainResult", "load_policy"):  # imported on first use: `import syncfree` stays light
        from syncfree import api

        return getattr(api, name)
    raise AttributeError(f"module 'syncfree' has no attribute {name!r}")
