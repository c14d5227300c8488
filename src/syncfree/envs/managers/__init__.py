"""The manager layer: tasks declared as term tables (observations, rewards, terminations, events, commands)."""
