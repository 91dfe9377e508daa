"""One rank of a multi-node training: its place on the host (device, cores), its peers."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from launch.exits import report, run_node
from nodes.config import Config
from nodes.errors import ConfigError
from nodes.placement import apply, here, use_device
from nodes.signals import DEFAULT as DEFAULT_STOP_SIGNALS

log = logging.getLogger("launch")


def run_rank(cfg: Config, world, stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS) -> int:
    """Train as `world.rank`; returns the process exit code."""
    from sync.peers import DistPeers

    cfg.nodes = world.size
    try:
        # before the process group: NCCL binds to this rank's GPU from the start
        placement = here(cfg, solo=False)
    except ConfigError as exc:  # e.g. no GPU on this host: the job fails with one line naming it
        return report(exc)
    apply(cfg, placement)
    use_device(placement.device)
    log.info("rank %d of %d (%s), rendezvous %s:%d, device %s, %d rollout workers on cores %s",
             world.rank, world.size, world.source, world.master_addr, world.master_port, placement.device,
             placement.num_workers, placement.worker_cores)
    return run_node(cfg, DistPeers(world, cfg.sync, placement.device), stop_signals, placement)
