"""The sampler's rooms: worker processes, rollout and policy workers, shared buffers and weights, and
the batcher that turns finished trajectories into the learners' batches."""
