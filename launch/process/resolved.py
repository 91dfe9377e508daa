"""The run's resolved config, <run_dir>/config.yaml: written once by the command that starts the run
(launch.train, launch.chaos, launch.bench), read back by every process started from it (launch.node,
a Slurm task, launch.enjoy), so all of them run the config that was composed and checked once.

A relaunch leaves the run directory's record as it found it until it is accepted: config.yaml, and
Hydra's own record of the launch (its unresolved config, overrides and hydra.yaml) in .hydra/.
Hydra writes its record before the app runs, so conf/config.yaml points it at PENDING instead (the
same directory, so that taking it in is a rename), and `write_resolved` moves it into .hydra/; a
launch refused before then leaves nothing (`discard_pending`). A node may still refuse the launch
after it (a checkpoint that does not fit, found as the node loads it: exit code 2): `Replaced` puts
back what write_resolved replaced.
"""
from __future__ import annotations

import contextlib
import os
import shutil

from omegaconf import OmegaConf

from launch.process.exits import refuse
from nodes.config.schema import Config

CONFIG = "config.yaml"
RECORD = ".hydra"  # Hydra's record of the accepted launch
PENDING = ".hydra.launch"  # where Hydra writes this launch's: conf/config.yaml's hydra.output_subdir
REFUSED = 2  # the exit code of a refused launch (launch.process.exits)


class Replaced:
    """The run directory's config.yaml and Hydra record as they were before a launch wrote its
    own (None: a file that was not there), to put back if the launch is refused."""

    def __init__(self, run_dir: str, names: list[str]):
        self.run_dir = run_dir
        self.files: dict[str, bytes | None] = {name: _read(os.path.join(run_dir, name)) for name in names}

    def put_back(self) -> None:
        for name, data in self.files.items():
            path = os.path.join(self.run_dir, name)
            if data is None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            else:
                _write(path, data)
        with contextlib.suppress(OSError):  # a record that was not there before: its directory too
            os.rmdir(os.path.join(self.run_dir, RECORD))

    def settle(self, code: int) -> int:
        """The launch ended with exit code `code`: a refusal (REFUSED: nothing trained) puts back
        what it replaced. Returns `code`."""
        if code == REFUSED:
            self.put_back()
        return code


def write_resolved(obj: Config) -> Replaced:
    """Write the launch's config.yaml and take Hydra's record of it (PENDING) into .hydra/: the
    launch is accepted as far as the launcher can tell. Returns what they replaced."""
    os.makedirs(obj.run_dir, exist_ok=True)
    pending = os.path.join(obj.run_dir, PENDING)
    taken = sorted(os.listdir(pending)) if os.path.isdir(pending) else []
    replaced = Replaced(obj.run_dir, [CONFIG, *(os.path.join(RECORD, name) for name in taken)])
    _write(os.path.join(obj.run_dir, CONFIG), OmegaConf.to_yaml(OmegaConf.structured(obj)).encode())
    if taken:
        os.makedirs(os.path.join(obj.run_dir, RECORD), exist_ok=True)
        for name in taken:
            os.replace(os.path.join(pending, name), os.path.join(obj.run_dir, RECORD, name))
        discard_pending(obj.run_dir)
    return replaced


def discard_pending(run_dir: str) -> None:
    """Hydra's record of a launch that did not write its config (refused first): removed."""
    shutil.rmtree(os.path.join(run_dir, PENDING), ignore_errors=True)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write(path: str, data: bytes) -> None:
    """`data` as the file `path`, atomically: a reader sees the old file or the new one."""
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def read_resolved(run_dir: str) -> Config:
    """The config launch.train wrote into `run_dir`, its run_dir the absolute path of `run_dir`."""
    path = os.path.join(run_dir, CONFIG)
    if not os.path.isfile(path):
        refuse(f"{path} not found (a run directory is written by launch.train)")
    cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
    obj: Config = OmegaConf.to_object(cfg)
    obj.run_dir = os.path.abspath(run_dir)
    return obj
