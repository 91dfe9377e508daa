"""`python -m launch.node RUN_DIR`: one rank of a multi-node run, from the run's resolved config.

Started by the local spawner (launch.local) and by cluster launchers with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT (or a Slurm step's variables) in the environment. Not a Hydra app:
the config was composed and validated once, by the command that started the run.
"""
from __future__ import annotations

import os
import sys

from omegaconf import OmegaConf

from launch.logs import rank_logging
from launch.overrides import refuse
from launch.ranks import run_rank
from nodes.config import Config
from sync.world import detect


def load_config(run_dir: str) -> Config:
    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isfile(path):
        refuse(f"{path} not found (a run directory is written by launch.train)")
    cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
    obj: Config = OmegaConf.to_object(cfg)
    obj.run_dir = os.path.abspath(run_dir)
    return obj


def main(argv) -> int:
    if len(argv) != 1:
        print("usage: python -m launch.node RUN_DIR", file=sys.stderr)
        return 2
    cfg = load_config(argv[0])
    world = detect()
    if world is None:
        refuse("launch.node needs a world (RANK/WORLD_SIZE/MASTER_PORT or a Slurm step)")
    rank_logging(cfg.run_dir, world.rank)
    return run_rank(cfg, world)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
