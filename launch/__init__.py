"""Entry points, one per `python -m launch.X`: train, node, enjoy, bench, curves, chaos, scaling,
config_docs. Their helpers live in the subpackages: cli (what every command shares: the Hydra app,
overrides, the resolved config, logs, exit codes), spawn (starting ranks: the local spawner,
emulated hosts, one rank's driver), slurm (launcher=slurm) and tools (the parts of the measuring
commands); no helper imports an entry point."""
