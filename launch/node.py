"""`python -m launch.node RUN_DIR`: one rank of a multi-node run, from the run's resolved config.

Started by the local spawner (launch.local) and by cluster launchers with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT (or a Slurm step's variables) in the environment. Not a Hydra app:
the config was composed and validated once, by the command that started the run.
"""
from __future__ import annotations

import os
import sys

from omegaconf import OmegaConf

from launch.ranks import rank_logging, run_rank
from nodes.config import Config
from sync.world import detect


def load_config(run_dir: str) -> Config:
    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isfile(path):
        print(f"error: {path} not found (launch.node runs a run directory written by launch.train)",
              file=sys.stderr)
        sys.exit(2)
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
        print("error: launch.node needs a world (RANK/WORLD_SIZE/MASTER_PORT or a Slurm step)", file=sys.stderr)
        return 2
    rank_logging(cfg.run_dir, world.rank)
    return run_rank(cfg, world)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
