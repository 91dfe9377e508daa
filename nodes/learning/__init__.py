"""The learner's rooms: the batcher, the APPO step, its losses and optimizer."""
