"""`syncfree bench`: the switches' configurations timed side by side, counted, and set against a compute floor."""

from syncfree.bench.config import BenchConfig, parse_arguments
from syncfree.bench.run import run

__all__ = ["BenchConfig", "parse_arguments", "run"]
