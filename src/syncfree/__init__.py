"""syncfree: PPO for massively parallel environments, with no host syncs in the hot loop."""

__version__ = "0.1.0"
