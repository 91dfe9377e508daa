"""`python -m launch.train [overrides]`: train one policy (see README for the contract).

nodes=1 runs the single-node fallback in this process, with no torch.distributed at all.
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
    if obj.nodes > 1:
        refuse(f"nodes={obj.nodes}: multi-node training (sync/) is not available yet; use nodes=1")
    write_resolved(obj)
    from nodes.checkpoint import CheckpointError
    from nodes.node import Node, Stopped, WorkerFailed
    log.info("run directory: %s", obj.run_dir)
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
