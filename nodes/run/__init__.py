"""The run's state and who shares it: the run state, membership, the Peers contract, stop signals."""
