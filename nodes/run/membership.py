"""Membership: which nodes train together, and every rank holding the same run state.

A fixed world (sync.elastic=false, or one node): at the start every rank takes rank 0's whole run
state (nodes.run.run_state: parameters, optimizer, versions, normalisers, frames, iterations), so
ranks that resumed from different checkpoints agree; a lost peer ends the run (raised).

Elastic membership (sync.elastic, the peers' `connect/regroup/share`): the workers start before
the node enters the run's world; when an iteration fails because a peer is gone (PeerLost), or a
node waits to join (`peers.changes_pending()`, the same answer on every rank), the node re-forms
the world with the others, takes the state of the rank that went furthest, compares checksums and
goes on; the writer's duties follow rank 0; below sync.min_nodes the run stops (TooFewNodes) with
a checkpoint. Every change is recorded (`changes`: summary.json, TensorBoard).

Sync-agnostic: everything crosses machines through `peers` (nodes.run.peers).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from nodes.errors import PeerLost, TooFewNodes, one_line

log = logging.getLogger("nodes")


class Membership:
    def __init__(self, cfg, peers, state, record, on_world: Callable[[], None], on_state: Callable[[bool], None]):
        """record: the run record (nodes.record.run_record) that logs each change. on_world(): this rank's
        place changed (rank, world size, writer). on_state(newer): the run state was replaced by a
        peer's (newer: one that went further than this rank's)."""
        self.cfg, self.peers, self.state, self.record = cfg, peers, state, record
        self.on_world, self.on_state = on_world, on_state
        self.elastic = peers.elastic
        self.changes: list[dict] = []  # elastic: each change of the world (summary.json, TensorBoard)

    @property
    def world(self) -> int:
        return self.peers.world_size

    def start(self) -> None:
        """A fixed world: the population's groups, then rank 0's run state on every rank."""
        self.peers.add_members(self.state.members.size)
        self.on_world()
        self.share()

    def enter(self) -> dict:
        """Elastic: the run's next generation (the first, or the one a running world forms for the
        nodes waiting to join), the population's groups, the state of the rank that went furthest."""
        t0 = time.time()
        change = self.peers.connect()
        self.peers.add_members(self.state.members.size)
        self.on_world()
        self.share()
        self.check()
        self._record(change, t0)
        log.info("node %d is rank %d of %d (generation %d, nodes %s)", self.peers.node, self.peers.rank, self.world,
                 change["generation"], change["nodes"])
        if self.world < self.cfg.sync.min_nodes:
            raise TooFewNodes(f"{self.world} node(s) came, below sync.min_nodes={self.cfg.sync.min_nodes}")
        return change

    def survive(self, exc: PeerLost) -> None:
        """A peer was lost in an iteration: a fixed world ends here (raises); an elastic one re-forms
        without it and goes on."""
        if not self.elastic:
            raise exc
        log.warning("%s: the survivors re-form the world", one_line(exc))
        self.regroup(exc.ranks)

    def regroup(self, lost: list[int]) -> None:
        """The world changed (ranks `lost`, or nodes waiting to join): form the next one, take the
        state of the survivor that went furthest, check that every rank holds the same state,
        record the change; below sync.min_nodes, TooFewNodes (the run stops with a checkpoint)."""
        t0, before = time.time(), self.world
        while True:
            try:
                change = self.peers.regroup(lost)
                self.on_world()
                self.share()
                self.check()
                break
            except PeerLost as exc:  # another loss while changing: form the next one
                log.warning("%s: forming the world again", one_line(exc))
                lost = exc.ranks
        self._record(change, t0)
        log.info("world changed: %d -> %d nodes (left %s, joined %s) in %.1f s, generation %d, now rank %d",
                 before, self.world, change["left"] or "none", change["joined"] or "none", change["seconds"],
                 change["generation"], self.peers.rank)
        if self.world < self.cfg.sync.min_nodes:
            lost_ids = sorted({n for c in self.changes for n in c["left"]} - set(change["nodes"]))
            raise TooFewNodes(f"{self.world} node(s) left, below sync.min_nodes={self.cfg.sync.min_nodes} "
                              f"(lost node {', '.join(map(str, lost_ids))}): checkpoint written, relaunch to resume")

    def share(self) -> None:
        """Every rank takes the run state of the rank that went furthest (elastic), or of rank 0 (a
        fixed world: every rank offers progress 0, and the lowest rank among equals is the source)."""
        progress = self.state.progress if self.elastic else 0
        data = self.peers.share(progress, self.state.to_bytes)
        if data is None:  # this rank's state is everyone's
            return
        before = self.state.progress
        self.state.load_bytes(data, self.state.learners[0].device)
        self.on_state(self.state.progress != before)

    def check(self) -> None:
        """Every member's parameters and run state are the same on every rank (raises if not)."""
        for p, learner in enumerate(self.state.learners):
            self.peers.check_agreement(learner.model, learner.version, self.state.fingerprint(p))

    def _record(self, change: dict, t0: float) -> None:
        st = self.state
        change.update(time=round(time.time(), 3), iteration=st.iterations, env_frames=st.stats.env_frames,
                      version=st.learners[0].version, seconds=round(time.time() - t0, 3))
        self.changes.append(change)
        self.record.membership(st.stats.env_frames, self.world, len(self.changes))

    def iterated(self) -> None:
        """An iteration ended: how long the last change cost, up to the next iteration."""
        if self.changes and "next_iteration" not in self.changes[-1]:
            self.changes[-1]["next_iteration"] = round(time.time(), 3)
