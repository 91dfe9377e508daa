"""`python -m launch.node RUN_DIR`: one rank of a multi-node run, from the run's resolved config.

Started by the local spawner (launch.spawn.local) and by cluster launchers with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT (or a Slurm step's variables) in the environment. Not a Hydra app:
the config was composed and validated once, by the command that started the run.

With sync.elastic (the default) and no world in the environment, the node joins the run in
progress (or, in a Slurm job array, the world its elements form): its id is DISTRL_NODE_ID, else
the array element's SLURM_ARRAY_TASK_ID, else the next free one; it finds the run through the
rendezvous file in RUN_DIR (sync.rendezvous), so any machine that sees the run directory can add
a node, whichever nodes are gone.
"""
from __future__ import annotations

from launch.process.allocator import preload_tcmalloc

if __name__ == "__main__":  # first, before torch: may start this command again with tcmalloc (the same pid)
    preload_tcmalloc()

import os
import sys

from launch.process.exits import exit_now, refuse
from launch.process.logs import rank_logging
from launch.process.resolved import read_resolved
from launch.slurm.step import prepare_env
from launch.spawn.ranks import run_rank
from sync.world import detect


def main(argv) -> int:
    if len(argv) != 1:
        print("usage: python -m launch.node RUN_DIR", file=sys.stderr)
        return 2
    cfg = read_resolved(argv[0])
    prepare_env(cfg)  # in a Slurm step (srun): where its ranks meet, as for launch.train
    world = detect()
    if world is None and cfg.sync.elastic:  # a node joining the run (or an array element)
        from launch.spawn.ranks import make_rendezvous
        from sync.world import World

        given = os.environ.get("DISTRL_NODE_ID") or os.environ.get("SLURM_ARRAY_TASK_ID")
        rendezvous = make_rendezvous(cfg, int(given) if given else None)
        rank_logging(cfg.run_dir, rendezvous.node)
        world = World(rendezvous.node, cfg.nodes, int(os.environ.get("LOCAL_RANK", 0)), "", 0, "join")
        return run_rank(cfg, world, rendezvous=rendezvous)
    if world is None:
        refuse("launch.node needs a world (RANK/WORLD_SIZE/MASTER_PORT or a Slurm step), or sync.elastic=true "
               "to join a run")
    rank_logging(cfg.run_dir, world.rank)
    return run_rank(cfg, world)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
