"""What a run records: checkpoints, statistics and their scalars, summary.json, where its time and memory go."""
