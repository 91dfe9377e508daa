"""Entry points, one per `python -m launch.X`: train, node, enjoy, bench, curves, chaos, scaling,
config_docs. Their helpers live in the subpackages, each importing only those after it: cli (the
command line: Hydra's grammar, the app the Hydra commands share), slurm (launcher=slurm), tools
(the parts of the measuring commands), spawn (starting ranks: the local spawner, emulated hosts,
one rank's driver), process (what every process shares: the resolved config, its log, its exit
code); no helper imports an entry point."""
