"""One rank of a multi-node training: its device, its share of the machine, its peers."""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence

from launch.exits import run_node
from nodes.config import Config, cpu_count
from nodes.signals import DEFAULT as DEFAULT_STOP_SIGNALS

log = logging.getLogger("launch")


def run_rank(cfg: Config, world, stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS) -> int:
    """Train as `world.rank`; returns the process exit code."""
    from sync.peers import DistPeers

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
    m = re.match(r"\d+", per_node)  # Slurm writes e.g. "2(x3)"
    local_size = int(m.group(0)) if m else 1
    if local_size > 1:
        if not cfg.train.learner_threads:
            cfg.train.learner_threads = max(1, cpu_count() // local_size)
        cfg.sampler.pin_offset = world.local_rank * cfg.sampler.num_workers
    log.info("rank %d of %d (%s), rendezvous %s:%d", world.rank, world.size, world.source,
             world.master_addr, world.master_port)
    return run_node(cfg, DistPeers(world, cfg.sync, device), stop_signals)
