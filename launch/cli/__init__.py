"""The command line: Hydra's grammar checked before Hydra starts, and the app every Hydra entry point shares."""
