"""Running one rank of a multi-node training: logging per rank, peers from the world found."""
from __future__ import annotations

import logging
import re
import os
import sys

from nodes.config import Config, cpu_count

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def rank_logging(run_dir: str, rank: int, under_hydra: bool = False) -> None:
    """Rank 0 logs to run_dir/train.log, rank r to train_rank<r>.log; the console names the rank.

    Under Hydra (srun/torchrun starting launch.train) Hydra's console handler stays and only its
    file handler, which every rank would share, is replaced.
    """
    root = logging.getLogger()
    for h in list(root.handlers):
        if not under_hydra or isinstance(h, logging.FileHandler):
            root.removeHandler(h)
    if not under_hydra:
        console = logging.StreamHandler(sys.stdout)
        console.setFormatter(logging.Formatter(f"[rank {rank}]{FORMAT}"))
        root.addHandler(console)
    fh = logging.FileHandler(os.path.join(run_dir, "train.log" if rank == 0 else f"train_rank{rank}.log"))
    fh.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(fh)
    root.setLevel(logging.INFO)


def run_rank(cfg: Config, world) -> int:
    """Train as `world.rank`; returns the process exit code."""
    from nodes.checkpoint import CheckpointError
    from nodes.node import Node, Stopped, WorkerFailed
    from sync.peers import DistPeers

    log = logging.getLogger("launch")
    device = cfg.train.device
    if device.startswith("cuda") and ":" not in device:
        device = f"cuda:{world.local_rank}"
        cfg.train.device = device
    if device.startswith("cuda"):
        import torch
        torch.cuda.set_device(torch.device(device))
    cfg.nodes = world.size
    # Several nodes on one machine (launch.local, or several tasks per Slurm node) share its
    # cores: split the learner threads (idle OpenMP threads spin and starve the other nodes)
    # and pin each node's rollout workers to its own cores.
    per_node = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("SLURM_NTASKS_PER_NODE", "1")
    local_size = int(re.match(r"\d+", per_node).group(0)) if re.match(r"\d+", per_node) else 1  # e.g. "2(x3)"
    if local_size > 1:
        if not cfg.train.learner_threads:
            cfg.train.learner_threads = max(1, cpu_count() // local_size)
        cfg.sampler.pin_offset = world.local_rank * cfg.sampler.num_workers
    log.info("rank %d of %d (%s), rendezvous %s:%d", world.rank, world.size, world.source,
             world.master_addr, world.master_port)
    peers = DistPeers(world, cfg.sync, device)
    clean = False  # every rank left after the same iteration (so rank 0 may wait for the others)
    try:
        Node(cfg, peers).run()
        clean = True
        return 0
    except CheckpointError as exc:
        log.error("%s", exc)
        return 2
    except Stopped as exc:
        clean = True
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130
    except WorkerFailed:
        return 1
    except Exception as exc:  # noqa: BLE001 - PeerLost, Diverged: already logged by the node
        print(f"error: {str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)}",
              file=sys.stderr, flush=True)
        return 1
    finally:
        peers.close(clean)
