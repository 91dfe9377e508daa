"""Sampler: a node's worker processes and its batchers, as the learners see them.

One batcher per population member (one policy is a population of one): `wait` hands the learners
one iteration's batches (nodes.sampling.batcher.wait_for_batches), `learn` runs every member's update and
gives the new weights to the policy workers and the slots back to the envs in the order that
makes each sampler mode's policy lag, `drop_collected` forgets trajectories of a policy that
another rank's state replaced. Nothing here knows of other machines: `peers` is passed in.
"""
from __future__ import annotations

import threading

from nodes.config.layout import in_rounds, slots_per_batch
from nodes.errors import PeerLost
from nodes.record.profile import LEARNER, LEARNER_ROW, Clock
from nodes.sampling.batcher import Batcher, wait_for_batches
from nodes.sampling.buffers import SlotBatch
from nodes.sampling.processes import WorkerPool

PUBLISH, STATS = (LEARNER.index(p) for p in ("publish", "stats"))


class Sampler:
    def __init__(self, cfg, members, spec, signals, on_episode, worker_cores):
        self.cfg, self.members = cfg, members
        self.spec, self.signals, self.on_episode, self.worker_cores = spec, signals, on_episode, worker_cores
        self.pool: WorkerPool | None = None
        self.batchers: list[Batcher] = []  # one per member
        self.batch_ready = threading.Event()  # some member's batch is ready
        self.batch_stop = threading.Event()
        self.deterministic = cfg.sampler.mode == "deterministic"
        self.held: list[SlotBatch | None] = [None] * members.size  # deterministic: the round learned from now
        self._empty: SlotBatch | None = None

    def start(self, phase: str, seed_rank: int) -> None:
        """The workers (phase: "train", or the benchmark's "sample" or "simulate"), each member's
        weights published, and the batchers (not for "simulate": nothing is collected)."""
        m, s = self.members, self.cfg.sampler
        self.pool = WorkerPool(self.cfg, seed_rank, self.spec, m.models, self.signals, self.on_episode,
                               self.worker_cores, start_version=m.learners[0].version, shaping=m.shaping_table())
        clock = Clock(self.pool.control.profile.numpy()[LEARNER_ROW])
        for learner in m.learners:
            learner.clock = clock
        self.publish_all()
        self.pool.start(phase)
        if phase == "simulate":
            return
        for p, learner in enumerate(m.learners):
            batcher = Batcher(self.pool.buffers, self.pool.channels, slots_per_batch(s), self.batch_stop,
                              learner.device, rounds=in_rounds(s), control=self.pool.control, member=p)
            batcher.notify = self.batch_ready
            batcher.start()
            self.batchers.append(batcher)

    def publish_all(self) -> None:
        """Every member's weights, the self-play snapshots (members P, P+1, ...) and the shaping weights."""
        m, pool = self.members, self.pool
        for p in range(m.size):
            self.publish(p)
        for k, snapshot in enumerate(m.snapshots):
            pool.weights[m.size + k].publish(snapshot, m.snapshots_taken)
        pool.control.snapshots[0] = min(m.snapshots_taken, len(m.snapshots))
        if m.weighs_terms:
            pool.control.shaping.copy_(m.shaping_table())

    def publish(self, p: int) -> None:
        learner = self.members.learners[p]
        self.pool.weights[p].publish(learner.model, learner.version)

    def wait(self, peers, tick: int, min_slots: int, idle) -> tuple[list[SlotBatch | None], bool]:
        return wait_for_batches(self.batchers, peers, tick, self.cfg.sync.straggler, min_slots, idle,
                                self.batch_ready)

    def learn(self, batches: list[SlotBatch | None], vote: int) -> list[dict]:
        """Every member's update on its batch, in member order, each in its own all-reduce (an empty
        batch joins it with no samples), `vote` this rank's stop vote (nodes.run.peers); returns each
        member's figures. A lost peer (elastic) drops this and the later members' batches: their
        slots go back to the envs."""
        trains = []
        for p, batch in enumerate(batches):
            try:
                trains.append(self._learn_one(p, batch if batch is not None else self._empty_batch(), vote))
            except PeerLost:
                for q in range(p, len(batches)):
                    if batches[q] is not None and batches[q].num_samples and not self.deterministic:
                        self.batchers[q].release(batches[q])
                raise
        return trains

    def _learn_one(self, p: int, batch: SlotBatch, vote: int) -> dict:
        """Member p's update on `batch`, and when the policy workers and the envs see its result: the
        order is what makes each mode's policy lag.

        async and sync: learn, publish, give the slots back (sync: the envs were waiting for them, so
        every rollout starts with the newest policy: lag 0). deterministic (HTS-RL): the batch is
        round k, collected with policy k-1 while the learner made policy k out of round k-1;
        publish policy k, give the envs round k-1's slots so they collect round k+1 with policy k,
        and learn on round k meanwhile: every update is on data exactly one policy older (lag 1;
        the first 0), and no env can see a policy before every env finished the round, so which
        policy chose which action never depends on timing."""
        learner, batcher = self.members.learners[p], self.batchers[p]
        clock = learner.clock
        if self.deterministic:
            clock(PUBLISH)
            self.publish(p)
            batcher.release(self.held[p])
            self.held[p] = batch
            train = learner.train_step(batch, vote)
        else:
            train = learner.train_step(batch, vote)
            clock(PUBLISH)
            if train["global_samples"]:
                self.publish(p)
            batcher.release(batch if batch.num_samples else None)
        clock(STATS)
        return train

    def _empty_batch(self) -> SlotBatch:
        """No trajectories (a member that has none this iteration)."""
        if self._empty is None:
            self._empty = SlotBatch.copy_slots(self.pool.buffers, [])
        return self._empty

    def drop_collected(self) -> None:
        """After this rank took another rank's (newer) state, async: trajectories collected before with
        an older policy are dropped (in rounds the envs wait for their round to be learned from: it
        is kept, off-policy)."""
        if in_rounds(self.cfg.sampler):
            return
        for batcher in self.batchers:
            while (batch := batcher.take_partial(1)) is not None:
                batcher.release(batch)

    def poll(self) -> None:
        """The workers' reports and their liveness; never blocks."""
        self.pool.poll(timeout=0.0)
        self.pool.check_alive()

    def stop(self, keep_janitor: bool = False) -> None:
        """The workers and batchers stopped (the janitor kept for release_janitor: WorkerPool.stop)."""
        self.batch_stop.set()
        if self.pool is not None:
            self.pool.stop(keep_janitor=keep_janitor)
        for batcher in self.batchers:
            batcher.join(5)

    def release_janitor(self) -> None:
        if self.pool is not None:
            self.pool.release_janitor()
