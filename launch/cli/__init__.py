"""What every entry point shares: the Hydra app, overrides, logs, exit codes."""
