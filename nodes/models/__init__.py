"""The actor-critic model and its parts: running normalisers, encoders, action heads, numerics."""
