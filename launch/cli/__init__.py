"""What every entry point shares: the Hydra app, overrides, the resolved config, logs, exit codes."""
