"""The run's bookkeeping: its state, membership, records, checkpoints, statistics, signals, seeds."""
