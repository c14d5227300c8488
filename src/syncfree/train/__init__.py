"""Training: the loop, checkpoints, logging, evaluation."""
