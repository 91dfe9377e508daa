"""Registers the Atari games with the gymnasium 0.29 that Sample Factory 2.1.1 needs, for
benchmarks/gpu_sf_atari.sh: ale-py 0.8.1 did it through a gymnasium plugin, but it has no wheel
past Python 3.11; ale-py 0.9+ (ROMs inside) registers its <Game>NoFrameskip-v4 ids when imported,
which nothing in Sample Factory does. On this directory's PYTHONPATH, every process of the run
(spawned workers too) imports gymnasium, then ale_py. Sample Factory's code is untouched."""

import importlib

try:
    for name in ("gymnasium", "ale_py"):  # in this order: ale_py registers into gymnasium
        importlib.import_module(name)
except ImportError:
    pass
