"""Everything that crosses machines (process groups, gradient all-reduce, ...).

The only package that imports torch.distributed. Empty until multi-node training lands: with one
node the learner's sync hook is the identity (nodes.learner.identity_sync).
"""
