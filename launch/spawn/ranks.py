"""One rank of a multi-node training: its place on the host (device, cores), its peers."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from launch.process.exits import report
from launch.spawn.driver import run_node
from nodes.config.schema import Config
from nodes.errors import ConfigError
from nodes.run.signals import DEFAULT as DEFAULT_STOP_SIGNALS
from nodes.run.signals import StopSignals
from nodes.sampling.fork_server import ensure_fork_server
from nodes.sampling.placement import apply, here, use_device

log = logging.getLogger("launch")


def run_rank(cfg: Config, world, stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS, rendezvous=None) -> int:
    """Train as `world.rank` (elastic: node `world.rank`, its rank found by the rendezvous, made
    here unless given); returns the process exit code."""
    # the workers' fork server imports torch while this process forms the world (launch.spawn.driver.run_node)
    ensure_fork_server(StopSignals(stop_signals))
    from sync.dist_peers import DistPeers

    if cfg.sync.elastic and rendezvous is None:
        rendezvous = make_rendezvous(cfg, world.rank)
    if rendezvous is None:
        cfg.nodes = world.size
    try:
        # before the process group: NCCL binds to this rank's GPU from the start
        placement = here(cfg, solo=False)
    except ConfigError as exc:  # e.g. no GPU on this host: the job fails with one line naming it
        return report(exc)
    apply(cfg, placement)
    use_device(placement.device)
    if rendezvous is not None:
        log.info("node %d (%s), elastic rendezvous %s, device %s, %d rollout workers on cores %s", rendezvous.node,
                 world.source, rendezvous.path, placement.device, placement.num_workers, placement.worker_cores)
    else:
        log.info("rank %d of %d (%s), rendezvous %s:%d, device %s, %d rollout workers on cores %s",
                 world.rank, world.size, world.source, world.master_addr, world.master_port, placement.device,
                 placement.num_workers, placement.worker_cores)
    try:  # the world's store and process group (a store address not this host's: one line, sync.listen)
        peers = DistPeers(world, cfg.sync, placement.device, rendezvous)
    except Exception as exc:  # noqa: BLE001 - reported as run_node reports what the node raises
        return report(exc)
    return run_node(cfg, peers, stop_signals, placement)


def make_rendezvous(cfg: Config, node: int | None):
    """The run's elastic rendezvous (sync.rendezvous) for node id `node` (None: the next free id)."""
    from sync.launches import launch_id
    from sync.rendezvous import Rendezvous

    y = cfg.sync
    return Rendezvous(cfg.run_dir, node, y.settle_s, y.timeout_s, y.min_nodes, y.max_nodes, first_size=cfg.nodes,
                      launch=launch_id(timeout_s=y.timeout_s))
