"""`python -m launch.train [overrides]`: train one policy (docs/run-directory.md: its files and exit codes).

- nodes=1: the single-node fallback, in this process, with no process group at all;
- nodes=N (launcher=local): N node processes on this machine over gloo (launch.spawn.local);
- launcher=slurm: one Slurm job of N nodes through submitit (launch.slurm); prints the job id and
  the run directory, and with launcher.wait=true waits for the job and exits with its result;
- started by srun / torchrun (a world in the environment), or as a task of Hydra's submitit
  launcher (hydra/launcher=submitit_slurm): this process is one rank of that world.

Before Hydra starts, the command line is checked point by point (launch.cli.overrides). A job
returns its run's mean episode reward, the objective of sweeper plugins such as Optuna.
"""
from __future__ import annotations

from launch.process.allocator import preload_tcmalloc

if __name__ == "__main__":  # first, before torch: may start this command again with tcmalloc (the same pid)
    preload_tcmalloc()

import json
import logging
import os
import sys

import hydra

from launch.cli.app import check, hydra_run_dir, resolve, sweep_name
from launch.cli.overrides import check_command
from launch.process.exits import exit_now, refuse
from launch.process.logs import rank_logging
from launch.process.resolved import discard_pending, write_resolved
from launch.spawn.driver import run_node
from nodes.errors import ConfigError

log = logging.getLogger("launch.train")


def objective(run_dir: str) -> float | None:
    """The run's mean episode reward from its summary.json: what a sweeper plugin optimises."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            value = json.load(f).get("mean_episode_reward")
    except (OSError, ValueError):
        return None
    return float(value) if value is not None else None


def finish(code: int, run_dir: str) -> float | None:
    """A failure exits with its code (it ends a sweep, as any failed job does); a finished run
    returns its objective (not sys.exit(0): under Hydra's submitit launcher the job returns it)."""
    if code:
        sys.exit(code)
    return objective(run_dir)


def main(cfg, submitted: list) -> float | None:
    """One run (or sweep point) of the composed config `cfg`; launcher=slurm adds the jobs to wait
    for (launcher.wait=true) to `submitted`."""
    obj = resolve(cfg, hydra_run_dir())
    from launch import slurm
    from sync.world import detect
    slurm.prepare_env(obj)  # in a Slurm step: the first node's address, and a port rank 0 publishes
    world = detect()
    if world is not None:  # srun / torchrun / Hydra's submitit launcher: join the world as one rank
        # hydra-submitit's tasks share the sweep directory its submitting process fixed
        if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]) and not slurm.under_hydra_submitit():
            refuse("under srun/torchrun every rank needs the same run directory: pass hydra.run.dir=...")
        from launch.spawn.ranks import run_rank
        obj.nodes = world.size
        replaced = write_resolved(obj) if world.rank == 0 else None
        rank_logging(obj.run_dir, world.rank, under_hydra=True)
        code = slurm.run_slurm_rank(obj, world) if world.source == "slurm" else run_rank(obj, world)
        return finish(replaced.settle(code) if replaced else code, obj.run_dir)
    if obj.launcher.name == "slurm":
        replaced = write_resolved(obj)
        try:
            jobs = slurm.submit(obj)  # returns: a sweep (-m) submits one job per point
        except ConfigError as exc:
            replaced.put_back()
            refuse(str(exc))
        if obj.launcher.wait:
            submitted.extend(jobs)
        return None
    # a node refuses a checkpoint that does not fit as it loads it: then what the launch wrote goes
    replaced = write_resolved(obj)
    log.info("run directory: %s", obj.run_dir)
    if obj.nodes > 1:
        from launch.spawn.local import spawn_nodes
        return finish(replaced.settle(spawn_nodes(obj)), obj.run_dir)
    rank_logging(obj.run_dir, 0, under_hydra=True)
    return finish(replaced.settle(run_node(obj, last=not sweep_name())), obj.run_dir)


def app(submitted: list):
    """The Hydra app. Hydra calls it once per run or sweep point and drops what it returns, so the
    jobs to wait for reach the command through `submitted`, its own list."""
    @hydra.main(config_path="../conf", config_name="config", version_base="1.3")
    def hydra_main(cfg) -> float | None:
        try:
            return main(cfg, submitted)
        finally:  # Hydra's record of a launch refused before it wrote its config (launch.process.resolved)
            discard_pending(hydra_run_dir())

    return hydra_main


def run(argv: list[str]) -> int:
    sys.argv[1:] = check_command(argv, check)  # Hydra's app reads sys.argv: 1e6 as 1000000 for an int key
    submitted: list = []
    app(submitted)()
    from launch.slurm import wait_submitted
    return wait_submitted(submitted)  # launcher=slurm launcher.wait=true: every job this command submitted


if __name__ == "__main__":
    exit_now(run(sys.argv[1:]))
