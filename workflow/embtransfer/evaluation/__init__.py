"""Evaluation of checkpoints: lm-eval tasks, miniature-world tasks, intrinsic metrics."""
