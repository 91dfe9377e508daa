"""The sampler's rooms: worker processes, rollout and policy workers, shared buffers and weights."""
