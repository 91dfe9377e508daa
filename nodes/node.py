"""A node: the training loop of one machine.

`Node(cfg).run()` trains until a stop condition, a signal or a failure, then stops every
process, writes a final checkpoint and the run summary, and returns the summary (or raises what
ended it: nodes.errors.Stopped, WorkerFailed, KeyboardInterrupt, or what the peers raised; the
launcher turns it into an exit code). `Node(cfg).measure(phase, s)` runs the same layout without
learning ("sample") or without inference ("simulate") for the benchmark.

What the loop uses, each with one job: the worker processes and their shared memory
(nodes.processes.WorkerPool), the batcher thread (nodes.batcher), the learner (nodes.learner),
the stop signals (nodes.signals), the run and per-rank statistics (nodes.stats), and the other
nodes (`peers`: nodes.peers.Solo for one node; sync/ supplies the multi-node one), so this module
knows nothing of other machines.

A population (population.size > 1, nodes.members) has a learner and a batcher per member; every
member learns in every iteration, in member order, each in its own all-reduce group; after a
stats gather a PBT step may replace members (nodes.pbt), the same on every rank.

Elastic membership (sync.elastic, the peers' `connect/regroup/share`): the workers start before the
node enters the run's world; when an iteration fails because a peer is gone (PeerLost), or a node
waits to join (`peers.changes_pending()`, the same answer on every rank), the node re-forms the
world with the others, takes the state of the rank that went furthest, compares checksums and
goes on; the writer's duties follow rank 0; below sync.min_nodes the run stops with a checkpoint.

Every training iteration calls the peers at the same points on every rank: batch ready (or cut
short because the others are ready), gradient reduction, observation-statistics sum, a small
stats gather (which also carries each rank's wish to stop, so all ranks stop after the same
iteration), and every `sync.check_every` iterations a parameter-checksum comparison.
"""
from __future__ import annotations

import io
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from nodes import checkpoint as ckpt
from nodes import profile
from nodes.batcher import Batcher, wait_for_batch, wait_for_members
from nodes.buffers import SlotBatch
from nodes.config import in_rounds, need_envs_for, slots_per_batch
from nodes.envs import env_spec
from nodes.errors import PeerLost, Stopped, TooFewNodes, one_line
from nodes.members import Members
from nodes.memory import MemoryWatch, Sample
from nodes.models import deterministic_kernels, param_checksum
from nodes.peers import Peers, Solo
from nodes.placement import Placement, apply, here, use_device
from nodes.processes import WorkerPool
from nodes.profile import LEARNER, LEARNER_ROW, Clock
from nodes.signals import DEFAULT as DEFAULT_STOP_SIGNALS
from nodes.signals import StopSignals
from nodes.stats import RANK_ROW_WIDTH, RankRow, RankStats, RunStats, TensorBoard, merged_match, merged_reward

log = logging.getLogger("nodes")

WAIT, PUBLISH, STATS = (LEARNER.index(p) for p in ("wait", "publish", "stats"))


class Node:
    def __init__(self, cfg, peers: Peers | None = None, is_writer: bool | None = None,
                 stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS, placement: Placement | None = None):
        """stop_signals: signals that stop the run after the current step (a stop vote with several
        nodes); a launcher adds its own (launch.slurm: Slurm's preemption signal). placement: this
        rank's device and cores (nodes.placement; found here when not given); ConfigError when
        this host cannot run the layout."""
        self.cfg = cfg
        self.peers = peers or Solo()
        self.elastic = self.peers.elastic  # sync.elastic: the world may change during the run
        self._writer_forced = is_writer
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.is_writer = self.peers.is_writer if is_writer is None else is_writer
        self.tb: TensorBoard | None = None  # the writer's
        self.membership: list[dict] = []  # elastic: each change of the world (summary.json, TensorBoard)
        self.run_dir = cfg.run_dir
        self.placement = placement or here(cfg, solo=self.world == 1)
        apply(cfg, self.placement)
        if cfg.sampler.mode == "deterministic":
            deterministic_kernels()  # before CUDA starts; the workers inherit the environment
        use_device(cfg.train.device)
        self.signals = StopSignals(stop_signals)
        self.spec = env_spec(cfg.env)
        if cfg.population.size > 1:  # sampler.num_workers=auto is known only now
            need_envs_for(cfg.population.size, cfg.sampler.num_workers * cfg.sampler.envs_per_worker, cfg.env.agents)
        torch.set_num_threads(cfg.train.learner_threads)
        # The learners run on train.device, the policy workers on sampler.policy_device; they get
        # the weights through SharedWeights (on the policy workers' device: CUDA IPC on a GPU).
        # One learner, or one per population member (nodes.members).
        self.members = Members(cfg, self.spec, self.peers, torch.device(cfg.train.device))
        self.learner = self.members.learners[0]
        self.model = self.learner.model
        self.population = self.members.size > 1  # several learners: the population's iteration
        self.stats = RunStats()
        self.ranks = RankStats()
        self.resumed_from: str | None = None
        self.pool: WorkerPool | None = None
        self.batcher: Batcher | None = None  # member 0's (the only one without a population)
        self.batchers: list[Batcher] = []  # one per member
        self.batch_ready = threading.Event()  # a population: some member's batch is ready
        self.iterations = 0  # learner iterations in this launch (a population's count: every member learns in each)
        self.member_trains: list[dict] = []  # a population: each member's figures of the last iteration
        self.new_events: list[dict] = []  # a population: the PBT replacements of the last gather
        self._empty: SlotBatch | None = None
        self.batch_stop = threading.Event()
        self.held: SlotBatch | None = None  # deterministic mode: the batch whose slots the envs get next
        self.partial_batches = 0  # batches this rank cut short (straggler handling)
        self.sync_s_total = 0.0  # seconds this rank spent in the gradient all-reduce
        self.samples_total = 0  # samples this rank trained on in this launch
        self.since_gather = 0  # iterations since the stats rows were last gathered
        # With several nodes a signal is a vote to stop, not an immediate stop (all ranks must leave
        # the lockstep loop together): cast with the next gradient all-reduce, so every rank stops
        # after that iteration.
        self.signal_is_vote = False

    # ----------------------------------------------------------------- resume / checkpoints
    def restore(self) -> None:
        path = ckpt.latest(self.run_dir)
        if path is None:
            return
        state = ckpt.load(path)
        self.members.load_state_dict(state, path)
        # frames are global (every rank counts all of them); episodes and recent rewards were
        # merged over ranks when saved, so only rank 0 takes them back
        mine = self.rank == 0
        self.stats = RunStats(int(state["env_frames"]), int(state["episodes"]) if mine else 0,
                              state["recent_rewards"] if mine else (),
                              recent_matches=state.get("recent_matches", ()) if mine else ())
        self.resumed_from = path
        log.info("resumed from %s: %d env frames, policy version %d", path, self.stats.env_frames,
                 self.learner.version)

    def save_checkpoint(self) -> None:
        if not self.is_writer:
            return
        state = self.members.state_dict()
        rows = self.ranks.rows
        episodes = int(sum(row.episodes for row in rows)) if rows else self.stats.episodes
        state.update(env_frames=self.stats.env_frames, episodes=episodes, recent_rewards=list(self.stats.rewards),
                     recent_matches=[dict(m) for m in self.stats.matches])
        path = ckpt.save(self.run_dir, state, self.cfg.train.keep_checkpoints)
        log.info("checkpoint %s", path)

    # ----------------------------------------------------------------- processes
    def _start(self, phase: str) -> None:
        s = self.cfg.sampler
        # the envs' seeds by rank; elastic by node id (the workers start before the node has a rank, and
        # ranks change while ids do not)
        seed_rank = self.peers.node if self.elastic else self.rank
        self.pool = WorkerPool(self.cfg, seed_rank, self.spec, self.members.models, self.signals, self._on_episode,
                               self.placement.worker_cores, start_version=self.learner.version,
                               shaping=self.members.shaping_table())
        clock = Clock(self.pool.control.profile.numpy()[LEARNER_ROW])
        for p, learner in enumerate(self.members.learners):
            self.pool.weights[p].publish(learner.model, learner.version)
            learner.clock = clock
        for k, snapshot in enumerate(self.members.snapshots):  # self-play snapshots: members P, P+1, ...
            self.pool.weights[self.members.size + k].publish(snapshot, self.members.snapshots_taken)
        self.pool.control.snapshots[0] = min(self.members.snapshots_taken, len(self.members.snapshots))
        self.pool.start(phase)
        if phase != "simulate":
            for p in range(self.members.size):
                self.batchers.append(Batcher(self.pool.buffers, self.pool.channels, slots_per_batch(s), self.batch_stop,
                                             self.learner.device, rounds=in_rounds(s), control=self.pool.control,
                                             member=p))
                self.batchers[-1].notify = self.batch_ready if self.population else None
                self.batchers[-1].start()
            self.batcher = self.batchers[0]

    def _on_episode(self, reward: float, length: int, match: dict | None = None, member: int = 0,
                    opponents=()) -> None:
        if member >= self.members.size:  # a self-play snapshot's seat: not a learner's episode
            return
        self.stats.add_episode(reward, length, match)
        self.members.on_episode(reward, length, match, member, opponents)

    def _idle(self) -> None:
        """Between polls for a batch: the workers' reports, their liveness, a stop signal. Never
        blocks: the wait is the batcher's (it wakes the learner the moment a batch is ready; a
        50 ms wait for reports here delayed every batch of the rounds modes, which have none
        ready ahead, by up to that much)."""
        self.pool.poll(timeout=0.0)
        self.pool.check_alive()
        if self.signals.received is not None and not self.signal_is_vote:
            raise Stopped(self.signals.received)

    def _stop(self) -> None:
        self.batch_stop.set()
        if self.pool is not None:
            self.pool.stop()
        for batcher in self.batchers:
            batcher.join(5)

    # ----------------------------------------------------------------- training
    def _frames_done(self) -> bool:
        """The frame budget is spent: the same answer on every rank (they count the same global frames)."""
        t = self.cfg.train
        return bool(t.max_env_frames and self.stats.env_frames >= t.max_env_frames)

    def _stop_vote(self) -> bool:
        """This rank's own reasons to stop (a signal, its time limit): voted, since ranks differ."""
        t = self.cfg.train
        return self.signals.received is not None or bool(t.max_seconds and self.stats.seconds >= t.max_seconds)

    def _stop_wanted(self) -> bool:
        return self._stop_vote() or self._frames_done()

    def _iteration(self, min_slots: int) -> tuple[dict, bool, bool]:
        """One learner iteration, identical in its collective calls on every rank: (its figures,
        whether it was the last, whether the stats rows were gathered after it). With a
        population every member learns in it, each in its own all-reduce, in member order."""
        cfg = self.cfg
        self.learner.clock(WAIT)
        if self.population:
            batches, partial = wait_for_members(self.batchers, self.peers, self.iterations, cfg.sync.straggler,
                                                min_slots, self._idle, self.batch_ready)
            # the vote rides in the gradient all-reduces: every rank learns every rank's vote from them
            train = self._learn_members(batches, self._stop_vote())
            local = sum(b.valid_samples for b in batches if b is not None)
            tick = self.iterations
        else:
            batch, partial = wait_for_batch(self.batcher, self.peers, self.learner.version, cfg.sync.straggler,
                                            min_slots, self._idle)
            train = self._learn(batch, self._stop_vote())
            local, tick = batch.valid_samples, self.learner.version
        self.iterations += 1
        self.partial_batches += partial
        self.pool.poll(timeout=0.0)
        self.stats.add_frames(train["global_samples"] * cfg.env.frameskip)
        self.sync_s_total += train["sync_s"]
        self.samples_total += local
        train.update(version=sum(m.version for m in self.members.learners), local_samples=local)
        self.stats.last_train = train
        last = bool(train["stop_voted"]) or self._frames_done()
        self.since_gather += 1
        # one node's "gather" is its own row, free: every iteration, so its curves keep every point
        gathered = last or self.world == 1 or tick % cfg.sync.stats_every == 0  # equal on every rank
        if gathered:
            self._gather()
        if self.world > 1 and tick % cfg.sync.check_every == 0:
            for learner in self.members.learners:
                self.peers.check_agreement(learner.model, learner.version)
        return train, last, gathered

    def _gather(self) -> None:
        """Every rank's stats row (and its members' rows) to every rank; then, with a population,
        a PBT step if one is due (the same decision on every rank: nodes.pbt)."""
        mine = self.stats.row(samples=float(self.samples_total), sync_s=self.sync_s_total,
                              partial=float(self.partial_batches), engine_restarts=float(self.pool.restarts))
        values = mine.to_floats() + (self.members.rows() if self.members.tracked else [])
        rows = self.peers.gather_stats(values)
        self.ranks.add([RankRow.from_floats(r[:RANK_ROW_WIDTH]) for r in rows], self.since_gather)
        self.since_gather = 0
        if not self.members.tracked:
            return
        self.members.merge([r[RANK_ROW_WIDTH:] for r in rows])
        slot = self.members.snapshot_step(self.stats.env_frames)
        if slot is not None:
            self.pool.weights[self.members.size + slot].publish(self.members.snapshots[slot],
                                                                self.members.snapshots_taken)
            self.pool.control.snapshots[0] = min(self.members.snapshots_taken, len(self.members.snapshots))
        events = self.members.pbt_step(self.stats.env_frames,
                                       self.pool.control.shaping if self.members.weighs_terms else None)
        for e in events:
            p = e["member"]
            self.pool.weights[p].publish(self.members.learners[p].model, self.members.learners[p].version)
        self.new_events = events

    def _learn_members(self, batches: list[SlotBatch | None], stop: bool) -> dict:
        """Every member's update on its batch (an empty one joins its all-reduce with no samples),
        each published when it stepped; the iteration's figures (samples summed, losses averaged
        over the members that stepped, weighted by their samples), each member's in member_trains."""
        trains = []
        for p, (learner, batch) in enumerate(zip(self.members.learners, batches)):
            if batch is None:
                batch = self._empty_batch()
            try:
                train = learner.train_step(batch, stop)
            except PeerLost:  # elastic: this and the later members' batches are dropped
                for q in range(p, len(batches)):
                    if batches[q] is not None and batches[q].num_samples:
                        self.batchers[q].release(batches[q])
                raise
            self.learner.clock(PUBLISH)
            if train["global_samples"]:
                self.pool.weights[p].publish(learner.model, learner.version)
            self.batchers[p].release(batch if batch.num_samples else None)
            self.learner.clock(STATS)
            trains.append(train)
        self.member_trains = trains
        total = sum(t["global_samples"] for t in trains)
        out = {k: sum(t[k] * t["global_samples"] for t in trains) / max(total, 1)
               for k in trains[0] if k not in ("global_samples", "stop_voted", "sync_s", "step_s", "policy_lag_max")}
        out.update(global_samples=total, stop_voted=max(t["stop_voted"] for t in trains),
                   sync_s=sum(t["sync_s"] for t in trains), step_s=sum(t["step_s"] for t in trains),
                   policy_lag_max=max(t["policy_lag_max"] for t in trains))
        return out

    def _empty_batch(self) -> SlotBatch:
        """No trajectories (a member that has none this iteration)."""
        if self._empty is None:
            self._empty = SlotBatch.copy_slots(self.pool.buffers, [])
        return self._empty

    def _learn(self, batch: SlotBatch, stop: bool = False) -> dict:
        """The update on `batch`, and when the policy workers and the envs see its result: the
        order is what makes each mode's policy lag.

        async and sync: learn, publish, give the slots back (sync: the envs were waiting for
        them, so every rollout starts with the newest policy: lag 0). deterministic (HTS-RL): the
        batch is round k, collected with policy k-1 while the learner made policy k out of round
        k-1; publish policy k, give the envs round k-1's slots so they collect round k+1 with
        policy k, and learn on round k meanwhile: every update is on data exactly one policy
        older (lag 1; the first 0), and no env can see a policy before every env finished the
        round, so which policy chose which action never depends on timing."""
        clock = self.learner.clock
        if self.cfg.sampler.mode == "deterministic":
            clock(PUBLISH)
            self.pool.weights[0].publish(self.model, self.learner.version)
            self.batcher.release(self.held)
            self.held = batch
            train = self.learner.train_step(batch, stop)
        else:
            try:
                train = self.learner.train_step(batch, stop)
            except PeerLost:  # elastic: the batch is dropped, its slots go back to the envs
                self.batcher.release(batch)
                raise
            clock(PUBLISH)
            self.pool.weights[0].publish(self.model, self.learner.version)
            self.batcher.release(batch)
        clock(STATS)
        return train

    def _train(self) -> None:
        """Start the workers (elastic: they run already), then iterate until every rank has voted to stop."""
        cfg, t, s = self.cfg, self.cfg.train, self.cfg.sampler
        min_slots = math.ceil(cfg.sync.min_batch_frac * slots_per_batch(s))
        if self.pool is None:
            self._start("train")
        self.stats.start_time = time.time()
        self.stats.start_frames = self.stats.env_frames
        next_status = time.time() + t.status_every_s
        next_ckpt = time.time() + t.checkpoint_every_s
        log.info("training: %d rollout workers x %d envs, %d policy worker(s), learner %d thread(s), batch %d, "
                 "rollout %d, %s%s", s.num_workers, s.envs_per_worker, s.num_policy_workers, torch.get_num_threads(),
                 s.batch_size, s.rollout, t.precision, f", rank {self.rank} of {self.world}" if self.world > 1 else "")
        self.signal_is_vote = self.world > 1 or self.elastic
        stop = self._stop_wanted()
        while not stop:
            try:
                train, stop, gathered = self._iteration(min_slots)
            except PeerLost as exc:
                stop = self._survive(exc)
                continue
            if self.membership and "next_iteration" not in self.membership[-1]:  # how long a change cost
                self.membership[-1]["next_iteration"] = round(time.time(), 3)
            self._record(train, gathered)
            now = time.time()
            # the last iteration gets its line too: a short run still shows where it ended
            if now >= next_status or stop:
                next_status = now + t.status_every_s
                if self.is_writer:
                    log.info(self.stats.status_line(self.ranks.rows) + self._members_line())
            if now >= next_ckpt:
                next_ckpt = now + t.checkpoint_every_s
                self.save_checkpoint()
            if not stop and self.peers.changes_pending():  # a node waits to join: every rank knows
                self._regroup([])
        self.signal_is_vote = False
        if self.signals.received is not None:
            raise Stopped(self.signals.received)

    def _record(self, train: dict, gathered: bool) -> None:
        """The writer's TensorBoard scalars and PBT log of an iteration."""
        if self.tb:
            self.tb.write(self.stats, train, self.ranks if gathered else None)
            if self.members.tracked:
                self.tb.write_members(self.stats.env_frames, self.member_trains, self.members, gathered)
        if self.new_events and self.is_writer:
            self._record_events(self.new_events)
        self.new_events = []

    # ----------------------------------------------------------------- elastic membership
    def _survive(self, exc: PeerLost) -> bool:
        """A peer was lost in an iteration: a fixed world ends here (raises); an elastic one re-forms
        without it and goes on. Returns whether to stop (the frame budget: the same on every rank;
        this rank's own votes ride in the next all-reduce)."""
        if not self.elastic:
            raise exc
        log.warning("%s: the survivors re-form the world", one_line(exc))
        self._regroup(exc.ranks)
        return self._frames_done()

    def _adopt_world(self) -> None:
        """This rank's place in the (new) world; the writer's duties go to its rank 0, the lowest
        node id left: TensorBoard opened there, closed on a node that is no longer rank 0."""
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.is_writer = self.peers.is_writer if self._writer_forced is None else self._writer_forced
        if self.is_writer and self.tb is None:
            self.tb = TensorBoard(os.path.join(self.run_dir, "tb"))
        elif not self.is_writer and self.tb is not None:
            self.tb.close()
            self.tb = None

    def _enter(self) -> None:
        """Elastic start: the workers first (a node joining a running world makes it wait only for
        the state's broadcast, not for its engines to start), then the run's next generation, the
        population's groups, and the state of the rank that went furthest."""
        self._start("train")
        t0 = time.time()
        change = self.peers.connect()
        self.peers.add_members(self.members.size)
        self._adopt_world()
        self._sync_state()
        for learner in self.members.learners:
            self.peers.check_agreement(learner.model, learner.version)
        change.update(time=round(time.time(), 3), iteration=self.iterations, env_frames=self.stats.env_frames,
                      version=self.learner.version, seconds=round(time.time() - t0, 3))
        self.membership.append(change)
        log.info("node %d is rank %d of %d (generation %d, nodes %s)", self.peers.node, self.rank, self.world,
                 change["generation"], change["nodes"])
        if self.tb:
            self.tb.write_membership(self.stats.env_frames, self.world, len(self.membership))
        if self.world < self.cfg.sync.min_nodes:
            raise TooFewNodes(f"{self.world} node(s) came, below sync.min_nodes={self.cfg.sync.min_nodes}")

    def _regroup(self, lost: list[int]) -> None:
        """The world changed (ranks `lost`, or nodes waiting to join): form the next one, take the
        state of the survivor that went furthest, check that every rank holds the same parameters,
        record the change; below sync.min_nodes, TooFewNodes (the run stops with a checkpoint)."""
        t0, before = time.time(), self.world
        while True:
            try:
                change = self.peers.regroup(lost)
                self._adopt_world()
                self._sync_state()
                for learner in self.members.learners:
                    self.peers.check_agreement(learner.model, learner.version)
                break
            except PeerLost as exc:  # another loss while changing: form the next one
                log.warning("%s: forming the world again", one_line(exc))
                lost = exc.ranks
        self.ranks = RankStats()  # per-rank rows are by rank, and the ranks changed
        self.since_gather = 0
        change.update(time=round(time.time(), 3), iteration=self.iterations, env_frames=self.stats.env_frames,
                      version=self.learner.version, seconds=round(time.time() - t0, 3))
        self.membership.append(change)
        log.info("world changed: %d -> %d nodes (left %s, joined %s) in %.1f s, generation %d, now rank %d",
                 before, self.world, change["left"] or "none", change["joined"] or "none", change["seconds"],
                 change["generation"], self.rank)
        if self.tb:
            self.tb.write_membership(self.stats.env_frames, self.world, len(self.membership))
        if self.world < self.cfg.sync.min_nodes:
            lost_ids = sorted({n for c in self.membership for n in c["left"]} - set(change["nodes"]))
            raise TooFewNodes(f"{self.world} node(s) left, below sync.min_nodes={self.cfg.sync.min_nodes} "
                              f"(lost node {', '.join(map(str, lost_ids))}): checkpoint written, relaunch to resume")

    def _sync_state(self) -> None:
        """Every rank takes the learners' state, frame count and iteration count of the rank that
        went furthest (elastic start, and after every change); the workers get the weights."""
        progress = sum(m.version for m in self.members.learners)
        data = self.peers.share(progress, self._state_bytes)
        if data is None:  # this rank's state is everyone's
            return
        state = torch.load(io.BytesIO(data), map_location=self.learner.device, weights_only=True)
        self.members.load_state_dict(state["members"], "the state a peer sent")
        self.stats.env_frames = int(state["env_frames"])
        self.iterations = int(state["iterations"])
        if self.pool is not None:
            for p, learner in enumerate(self.members.learners):
                self.pool.weights[p].publish(learner.model, learner.version)
            if self.members.weighs_terms:
                self.pool.control.shaping.copy_(self.members.shaping_table())
            if not in_rounds(self.cfg.sampler) and sum(m.version for m in self.members.learners) != progress:
                # async: trajectories collected before with an older policy are dropped (in rounds
                # the envs wait for their round to be learned from: it is kept, off-policy)
                for batcher in self.batchers:
                    while (batch := batcher.take_partial(1)) is not None:
                        batcher.release(batch)

    def _state_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save({"members": self.members.state_dict(), "env_frames": self.stats.env_frames,
                    "iterations": self.iterations}, buf)
        return buf.getvalue()

    def _members_line(self) -> str:
        """A population's part of the status line: each member's recent reward (or win rate) over all
        ranks, and the PBT replacements so far."""
        if not self.members.tracked or not self.members.merged:
            return ""
        win = self.cfg.pbt.objective == "win"
        parts = []
        for m in self.members.merged:
            if win and "match" in m:
                parts.append(f"{m['match']['win']:.0%}")
            else:
                parts.append("n/a" if m["reward"] is None else f"{m['reward']:.1f}")
        replaced = len(self.members.pbt.events)
        return f" | members {'win' if win else 'reward'} {' / '.join(parts)} | pbt replacements {replaced}"

    def _record_events(self, events: list[dict]) -> None:
        """The writer appends each PBT replacement to run_dir/pbt.jsonl (one JSON object a line)."""
        with open(os.path.join(self.run_dir, "pbt.jsonl"), "a") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")

    def run(self) -> dict:
        """Train; returns the summary (also written to run_dir/summary.json by the writer)."""
        os.makedirs(self.run_dir, exist_ok=True)
        self.restore()  # a checkpoint that does not fit: CheckpointError before anything started
        if not self.elastic:
            self.peers.add_members(self.members.size)
            for learner in self.members.learners:
                self.peers.start(learner.model, learner.optimizer)
            self._adopt_world()
        outcome, error = "finished", None
        with self.signals:
            try:
                if self.elastic:
                    self._enter()
                self._train()
            except (Exception, KeyboardInterrupt) as exc:  # a worker, a lost peer, a signal, a bug
                outcome, error = ending(exc), exc
            finally:
                summary, outcome, error = self._finish(outcome, error)
        if error is not None:
            raise error
        return summary

    def _finish(self, outcome: str, error: BaseException | None) -> tuple[dict, str, BaseException | None]:
        """Stop the processes, write the final checkpoint (not after a failure: no final collective)
        and the summary; returns (summary, outcome, error), a failed checkpoint being the error."""
        seconds = self.stats.seconds
        self._stop()
        if outcome != "failed" or (self.learner.version > 0 and self.world == 1):
            try:
                self.save_checkpoint()
            except Exception as exc:  # the summary is still written; the first error is reported
                if error is None:
                    outcome, error = "failed", exc
                else:
                    log.warning("final checkpoint not written either: %s", one_line(exc))
        summary = self.summary(seconds, outcome, collective=outcome != "failed")
        if self.tb:
            self.tb.close()
        if self.elastic and self.is_writer and (outcome == "finished" or isinstance(error, TooFewNodes)):
            self.peers.mark_over(outcome)  # a node that comes later has nothing to join
        shown = {k: v for k, v in summary.items() if k != "param_checksums"}
        log.info("run %s: %s", outcome, json.dumps(shown))
        return summary, outcome, error

    def summary(self, seconds: float, outcome: str, collective: bool = True) -> dict:
        st = self.stats
        # after a failure a peer may be gone: no collective, only this rank's checksum; with
        # several nodes the last agreed one (after an NCCL failure the GPU must not be touched)
        member_sums = []
        for learner in self.members.learners:
            if collective:
                member_sums.append(self.peers.check_agreement(learner.model, -1))
            elif self.world > 1:
                member_sums.append([self.peers.last_checksum] if learner is self.learner else [])
            else:
                member_sums.append([param_checksum(learner.model)])
        checksums = member_sums[0]
        restarts = float(self.pool.restarts) if self.pool is not None else 0.0
        rows = self.ranks.rows or [st.row(partial=float(self.partial_batches), engine_restarts=restarts)]
        summary = dict(
            env_frames=st.env_frames, seconds=round(seconds, 3),
            fps=round((st.env_frames - st.start_frames) / max(seconds, 1e-9), 1),
            episodes=int(sum(row.episodes for row in rows)), mean_episode_reward=merged_reward(rows),
            match=merged_match(rows),  # VizDoom matches: recent frags, deaths, place, win/draw/loss; else None
            policy_version=self.learner.version, nodes=self.world, param_checksums=checksums,
            outcome=outcome, resumed_from=self.resumed_from,
            policy_lag_mean=st.last_train.get("policy_lag_mean"),
            sync_share=round(self.sync_s_total / max(seconds, 1e-9), 4),
            partial_batches=int(sum(row.partial for row in rows)),  # all ranks: batches cut short
            engine_restarts=int(sum(row.engine_restarts for row in rows)),  # all ranks: agent matches restarted
            samples_per_rank=[int(x) for x in self.ranks.samples],
            sync_share_per_rank=self.ranks.sync_shares(),
        )
        if self.elastic:  # each change of the world this rank saw (the writer's: from its start on)
            summary.update(membership=self.membership, node=self.peers.node)
        if self.members.tracked:  # each member: version, hyper-parameters, figures over all ranks, checksums
            summary.update(population=self.members.summary(member_sums), pbt_events=self.members.pbt.events,
                           snapshots_taken=self.members.snapshots_taken)
        if self.is_writer:
            path = os.path.join(self.run_dir, "summary.json")
            with open(path + ".tmp", "w") as f:
                json.dump(summary, f, indent=2)
            os.replace(path + ".tmp", path)
        return summary

    # ----------------------------------------------------------------- benchmark phases
    def measure(self, phase: str, seconds: float, warmup_s: float) -> Measured:
        """One phase, "simulate", "sample" or "train", after a warm-up: its env frames/s, where
        its processes' time went over the measured seconds (nodes.profile) and the node's memory
        (nodes.memory: the peak over the whole phase, sampled every second)."""
        fs, s = self.cfg.env.frameskip, self.cfg.sampler
        watch = MemoryWatch(every_s=1.0)
        with self.signals:
            try:
                self._start(phase)
                watch.start()
                table = self.pool.control.profile.numpy()
                t_warm = time.time() + warmup_s
                t0, s0, t_end, before = None, 0, math.inf, None
                while True:
                    now = time.time()
                    if t0 is None and now >= t_warm:  # a slow first step may overrun the warm-up:
                        t0, s0, t_end = now, self.pool.worker_steps, now + seconds  # still measure `seconds`
                        before, cpu0 = table.copy(), profile.cpu_by_kind(self.pool)
                    if now >= t_end:
                        fps = (self.pool.worker_steps - s0) * fs / (now - t0)
                        split = profile.shares(before, table.copy(), profile.table_rows(s.num_policy_workers,
                                                                                         s.num_workers))
                        cpu1 = profile.cpu_by_kind(self.pool)
                        cores = {k: round((cpu1[k] - cpu0[k]) / (now - t0), 2) for k in cpu1}
                        watch.stop()
                        return Measured(fps, split, cores, watch.peak(), self.pool.shared_bytes)
                    self.learner.clock(WAIT)
                    self._idle()
                    if phase == "simulate":
                        time.sleep(0.05)  # nothing to wait for but the clock
                        continue
                    for p, batcher in enumerate(self.batchers):  # one, or a population's
                        batch = batcher.get_full(timeout=0.05 / len(self.batchers))
                        if batch is not None and phase == "train":
                            if self.population:
                                self._learn_members([batch if q == p else None for q in range(len(self.batchers))],
                                                    False)
                            else:
                                self._learn(batch)
                        elif batch is not None:
                            batcher.release(batch)
            finally:
                if watch.samples:
                    watch.stop()
                self._stop()


def ending(exc: BaseException) -> str:
    """The summary's `outcome` for what ended a run."""
    if isinstance(exc, TooFewNodes):
        return "stopped: below sync.min_nodes"
    if isinstance(exc, Stopped):
        return f"stopped by {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "failed"


@dataclass
class Measured:
    """What `Node.measure` found for one phase."""

    fps: float  # env frames/s over the measured seconds
    profile: dict  # {process kind: {phase: share of its time}} (nodes.profile.shares)
    cores: dict  # {main | policy | rollout: CPU cores those processes kept busy} (nodes.profile.cpu_by_kind)
    memory: Sample  # the node's peak memory sample (nodes.memory)
    shared_bytes: int  # the node's own shared buffers (WorkerPool.shared_bytes)
