"""A population of policies on one node: its learners, who plays whom, PBT."""
