"""Evaluation: whole episodes with a policy, and the evaluator process during training."""
