"""`python -m launch.train [overrides]`: train one policy (see README for the contract).

- nodes=1: the single-node fallback, in this process, with no process group at all;
- nodes=N (launcher=local): N node processes on this machine over gloo (launch.local);
- started by srun / torchrun (a world in the environment): this process is one rank of it.
"""
from __future__ import annotations

import logging
import sys

import hydra

from launch.app import hydra_run_dir, precheck_argv, refuse, resolve, write_resolved

log = logging.getLogger("launch.train")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    from sync.world import detect
    world = detect()
    if world is not None:  # srun / torchrun: join the world as one rank
        if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
            refuse("under srun/torchrun every rank needs the same run directory: pass hydra.run.dir=...")
        from launch.ranks import rank_logging, run_rank
        obj.nodes = world.size
        if world.rank == 0:
            write_resolved(obj)
        rank_logging(obj.run_dir, world.rank, under_hydra=True)
        sys.exit(run_rank(obj, world))
    write_resolved(obj)
    log.info("run directory: %s", obj.run_dir)
    if obj.nodes > 1:
        if obj.launcher.name != "local":
            refuse(f"launcher={obj.launcher.name} is not available yet; use launcher=local")
        from launch.local import spawn_nodes
        sys.exit(spawn_nodes(obj.run_dir, obj.nodes, obj.sync.master_port, grace_s=obj.sync.timeout_s + 30))
    from nodes.checkpoint import CheckpointError
    from nodes.node import Node, Stopped, WorkerFailed
    try:
        Node(obj).run()
    except CheckpointError as exc:
        refuse(str(exc))
    except WorkerFailed:
        sys.exit(1)
    except Stopped as exc:
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    precheck_argv(sys.argv[1:])
    main()
