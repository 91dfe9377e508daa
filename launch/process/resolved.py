"""The run's resolved config, <run_dir>/config.yaml: written once by the command that starts the run
(launch.train, launch.chaos, launch.bench), read back by every process started from it (launch.node,
a Slurm task, launch.enjoy), so all of them run the config that was composed and checked once."""
from __future__ import annotations

import os

from omegaconf import OmegaConf

from launch.process.exits import refuse
from nodes.config.schema import Config


def write_resolved(obj: Config) -> None:
    os.makedirs(obj.run_dir, exist_ok=True)
    path = os.path.join(obj.run_dir, "config.yaml")
    with open(path + ".tmp", "w") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.structured(obj)))
    os.replace(path + ".tmp", path)


def read_resolved(run_dir: str) -> Config:
    """The config launch.train wrote into `run_dir`, its run_dir the absolute path of `run_dir`."""
    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isfile(path):
        refuse(f"{path} not found (a run directory is written by launch.train)")
    cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
    obj: Config = OmegaConf.to_object(cfg)
    obj.run_dir = os.path.abspath(run_dir)
    return obj
