"""What every launched process shares: the run's resolved config, its log, how it ends (exit codes)."""
