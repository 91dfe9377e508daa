"""A node: the training loop of one machine.

`Node(cfg).run()` trains until a stop condition, a signal or a failure, then stops every
process, writes a final checkpoint and the run summary, and returns the summary (or raises what
ended it: nodes.errors.Stopped, WorkerFailed, KeyboardInterrupt, or what the peers raised; the
launcher turns it into an exit code).

The rooms the loop uses, each with one job: the run state every rank holds alike
(nodes.run.run_state), the workers and batchers (nodes.sampling.sampler), who trains together
(nodes.run.membership), what the run leaves in its directory (nodes.record.run_record), the learners
(nodes.population.members: one per population member; one policy is a population of one), the stop signals
(nodes.run.signals) and the statistics (nodes.record.stats). Other machines are `peers` (nodes.run.peers.Solo
for one node; sync/ supplies the multi-node one), so this module knows nothing of them.

Every training iteration calls the peers at the same points on every rank: batches ready (or cut
short because the others are ready), each member's gradient reduction (which carries every
rank's wish to stop, so all ranks stop after the same iteration, and the running norms'
moments), every sync.stats_every iterations a stats gather (after which a PBT step may replace
members, the same on every rank: nodes.population.pbt), every sync.check_every iterations a comparison of
each member's parameters and run state.
"""
from __future__ import annotations

import json
import logging
import math
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from nodes import faults
from nodes.config.layout import node_batch_size, slots_per_batch, splits_batch
from nodes.config.validate import need_envs_for, need_minibatches, node_trajectories
from nodes.envs import env_spec
from nodes.errors import PeerLost, Stopped
from nodes.evaluation.schedule import Evaluation
from nodes.models.numerics import deterministic_kernels
from nodes.population.members import Members
from nodes.record.profile import LEARNER
from nodes.record.run_record import RunRecord, members_line, to_cpu
from nodes.record.stats import RANK_ROW_WIDTH, RankRow, RankStats
from nodes.record.summary import checksums, merge_trains, run_summary
from nodes.run.ending import Ending
from nodes.run.membership import Membership
from nodes.run.peers import NO_SIGNAL, Peers, Solo
from nodes.run.run_state import RunState
from nodes.run.signals import DEFAULT as DEFAULT_STOP_SIGNALS
from nodes.run.signals import StopSignals
from nodes.sampling.fork_server import ensure_fork_server
from nodes.sampling.placement import Placement, apply, here, use_device
from nodes.sampling.sampler import Sampler

log = logging.getLogger("nodes")

WAIT = LEARNER.index("wait")


@dataclass
class LaunchTotals:
    """This rank's own figures over this launch (its row in the stats gather)."""

    partial: int = 0  # batches it cut short (straggler handling)
    sync_s: float = 0.0  # seconds in the gradient all-reduce
    samples: int = 0  # samples it trained on
    since_gather: int = 0  # iterations since the rows were last gathered


class Node:
    def __init__(self, cfg, peers: Peers | None = None, is_writer: bool | None = None,
                 stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS, placement: Placement | None = None):
        """stop_signals: signals that stop the run after the current step; a launcher adds its own
        (launch.slurm: Slurm's preemption signal). With several nodes (or elastic) a signal is a
        vote, from the start on: cast with the next gradient all-reduce, so every rank stops after
        the same iteration (a rank that stopped alone, even during start-up, would leave the others
        in a collective it never joins). placement: this rank's device and cores (nodes.sampling.placement;
        found here when not given); ConfigError when this host cannot run the layout."""
        self.launched = time.time()
        self.cfg = cfg
        self.peers = peers or Solo()
        self._writer_forced = is_writer
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.placement = placement or here(cfg, solo=self.world == 1)
        apply(cfg, self.placement)
        # sampler.num_workers=auto is known only now
        need_minibatches(cfg.algo, *node_trajectories(cfg, cfg.sampler.batch_size // cfg.sampler.rollout))
        # sync.global_batch: this node learns on its share of the world's batch (cfg is this rank's own copy)
        cfg.sampler.batch_size = node_batch_size(cfg.sampler, cfg.nodes,
                                                 splits_batch(cfg.sync.global_batch, cfg.train.device))
        if cfg.sampler.mode == "deterministic":
            deterministic_kernels()  # before CUDA starts; the workers inherit the environment
        use_device(cfg.train.device)
        self.signals = StopSignals(stop_signals, vote=self.world > 1 or self.peers.elastic)
        ensure_fork_server(self.signals)  # a no-op after launch.spawn.driver.run_node; else its imports run meanwhile
        self.spec = env_spec(cfg.env)
        if cfg.population.size > 1:
            need_envs_for(cfg.population.size, cfg.sampler.num_workers * cfg.sampler.envs_per_worker, cfg.env.agents)
        torch.set_num_threads(cfg.train.learner_threads)
        # The learners run on train.device, the policy workers on sampler.policy_device; they get
        # the weights through SharedWeights (on the policy workers' device: CUDA IPC on a GPU).
        self.members = Members(cfg, self.spec, self.peers, torch.device(cfg.train.device))
        self.state = RunState(self.members)
        self.sampler = Sampler(cfg, self.members, self.spec, self.signals, self.state.on_episode,
                               self.placement.worker_cores)
        self.record = RunRecord(cfg, self.peers.is_writer if is_writer is None else is_writer)
        self.membership = Membership(cfg, self.peers, self.state, self.record, self._on_world, self._on_state)
        self.evaluation = Evaluation(cfg, lambda: self.sampler.pool.janitor.pid)
        self.ranks = RankStats()
        self.totals = LaunchTotals()
        self.resumed_from: str | None = None
        self.train_seconds = 0.0  # from the first iteration to the last (summary.json)
        self.trains: list[dict] = []  # each member's figures of the last iteration
        self.events: list[dict] = []  # the PBT replacements of the last gather

    @property
    def stats(self):
        return self.state.stats

    def _on_world(self) -> None:
        """This rank's place in the (new) world; the writer's duties go to its rank 0 (elastic: the
        lowest node id left); per-rank rows are by rank, and the ranks changed."""
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.record.set_writer(self.peers.is_writer if self._writer_forced is None else self._writer_forced)
        if not self.record.is_writer:
            self.evaluation.close()  # the new writer evaluates, from eval.jsonl on
        self.ranks, self.totals.since_gather = RankStats(), 0

    def _on_state(self, newer: bool) -> None:
        """A peer's run state replaced this rank's: the policy workers get its weights; trajectories
        of this rank's older policy are dropped."""
        if self.sampler.pool is not None:
            self.sampler.publish_all()
            if newer:
                self.sampler.drop_collected()

    def idle(self) -> None:
        """Between polls for a batch: the workers' reports, their liveness, a stop signal (with one
        node). Never blocks: the wait is the batchers' (they wake the learner the moment a batch is
        ready). Public: the bench's phases (launch.tools.measure) poll with it as the loop does."""
        self.sampler.poll()
        if self.signals.received is not None and not self.signals.vote:
            raise Stopped(self.signals.received)

    # ----------------------------------------------------------------- the loop
    def _frames_done(self) -> bool:
        """The frame budget is spent: the same answer on every rank (they count the same global frames)."""
        t = self.cfg.train
        return bool(t.max_env_frames and self.stats.env_frames >= t.max_env_frames)

    def _stop_vote(self) -> int:
        """This rank's own reasons to stop, voted since ranks differ (nodes.run.peers): the signal it
        received, NO_SIGNAL for its time limit, 0 for none."""
        t = self.cfg.train
        if self.signals.received is not None:
            return self.signals.received
        return NO_SIGNAL if t.max_seconds and self.stats.seconds >= t.max_seconds else 0

    def _iteration(self, min_slots: int) -> tuple[dict, bool, bool]:
        """One learner iteration, identical in its collective calls on every rank: (its figures,
        whether it was the last, whether the stats rows were gathered after it). Every member
        learns in it, each in its own all-reduce, in member order; the stop votes ride in them."""
        cfg, st, tick = self.cfg, self.state, self.state.iterations
        self.members.learners[0].clock(WAIT)
        batches, partial = self.sampler.wait(self.peers, tick, min_slots, self.idle)
        progress = st.stats.env_frames / cfg.train.max_env_frames if cfg.train.max_env_frames else 0.0
        for learner in self.members.learners:
            learner.schedule_lr(progress, self.world)
        self.trains = self.sampler.learn(batches, self._stop_vote())
        train = merge_trains(self.trains)
        local = sum(b.valid_samples for b in batches if b is not None)
        st.iterations += 1
        self.sampler.pool.poll(timeout=0.0)
        st.stats.add_frames(train["global_samples"] * cfg.env.frameskip)
        self.totals.partial += partial
        self.totals.sync_s += train["sync_s"]
        self.totals.samples += local
        self.totals.since_gather += 1
        train.update(version=st.progress, local_samples=local)
        st.stats.last_train = train
        self.world_vote = int(train["stop_voted"])
        last = bool(self.world_vote) or self._frames_done()
        # one node's "gather" is its own row, free: every iteration, so its curves keep every point
        gathered = last or self.world == 1 or tick % cfg.sync.stats_every == 0  # equal on every rank
        if gathered:
            self._gather()
        if self.world > 1 and tick % cfg.sync.check_every == 0:
            self.membership.check()
        return train, last, gathered

    def _gather(self) -> None:
        """Every rank's stats row (and its members' rows) to every rank; then, with a population, a
        self-play snapshot and a PBT step if due (the same decisions on every rank)."""
        t, m = self.totals, self.members
        mine = self.stats.row(samples=float(t.samples), sync_s=t.sync_s, partial=float(t.partial),
                              engine_restarts=float(self.sampler.pool.restarts))
        rows = self.peers.gather_stats(mine.to_floats() + (m.rows() if m.tracked else []))
        self.ranks.add([RankRow.from_floats(r[:RANK_ROW_WIDTH]) for r in rows], t.since_gather)
        t.since_gather = 0
        if m.tracked:
            self.events, changed = m.after_gather([r[RANK_ROW_WIDTH:] for r in rows], self.stats.env_frames)
            if changed:
                self.sampler.publish_all()

    def _train(self) -> None:
        """Start the workers (elastic: they run already), then iterate until every rank has voted to stop."""
        cfg, t, s = self.cfg, self.cfg.train, self.cfg.sampler
        min_slots = math.ceil(cfg.sync.min_batch_frac * slots_per_batch(s))
        if self.sampler.pool is None:
            self.sampler.start("train", self.rank)
        self.stats.start_time, self.stats.start_frames = time.time(), self.stats.env_frames
        next_status, next_ckpt = time.time() + t.status_every_s, time.time() + t.checkpoint_every_s
        log.info("training: %d rollout workers x %d envs, %d policy worker(s), learner %d thread(s), batch %d, "
                 "rollout %d, %s%s", s.num_workers, s.envs_per_worker, s.num_policy_workers, torch.get_num_threads(),
                 slots_per_batch(s) * s.rollout, s.rollout, t.precision,  # rounds: every env's rollout, not batch_size
                 f", rank {self.rank} of {self.world}" if self.world > 1 else "")
        # a vote (a signal during start-up included) rides in the first all-reduce: only the frame
        # budget, the same on every rank, may end the run before it
        stop = self._frames_done() if self.signals.vote else bool(self._stop_vote()) or self._frames_done()
        self.world_vote = 0
        while not stop:
            try:
                train, stop, gathered = self._iteration(min_slots)
            except PeerLost as exc:
                self.membership.survive(exc)
                stop = self._frames_done()  # the same on every rank; this rank's votes ride in the next all-reduce
                continue
            self.membership.iterated()
            self.record.iteration(self.stats, train, self.ranks if gathered else None, self.members, self.trains,
                                  self.events)
            self.events = []
            if self.evaluation.enabled and self.record.is_writer:
                self.evaluation.step(self.stats.env_frames, self.members.learners[0].version,
                                     lambda: to_cpu(self._checkpoint_state()), self.record)
            now = time.time()
            if (now >= next_status or stop) and self.record.is_writer:  # the last gets its line too
                next_status = now + t.status_every_s
                log.info(self.stats.status_line(self.ranks.rows) + members_line(self.members, cfg.pbt.objective))
            if now >= next_ckpt:
                next_ckpt = now + t.checkpoint_every_s
                self.record.checkpoint(self._checkpoint_state())
            if not stop and self.peers.changes_pending():  # a node waits to join: every rank knows
                self.membership.regroup([])
        self.signals.vote = False
        # the world stopped on a signal: so does a rank whose own has not come (or never will)
        signum = self.signals.received or (self.world_vote if self.world_vote > 0 else None)
        if signum is not None:
            if self.signals.received is None:
                log.info("stopping on %s, another rank's vote", signal.Signals(signum).name)
            raise Stopped(signum)

    def _checkpoint_state(self) -> dict:
        rows = self.ranks.rows
        return self.state.state_dict(episodes=int(sum(row.episodes for row in rows)) if rows else None)

    def run(self) -> dict:
        """Train; returns the summary (also written to run_dir/summary.json by the writer)."""
        # a checkpoint that does not fit: CheckpointError before anything started (every rank reads
        # the latest; a fixed world then takes rank 0's state, so ranks that read different files agree)
        self.resumed_from = self.record.restore(self.state, episodes_here=self.rank == 0)
        if not self.peers.elastic:
            self.membership.start()
        end = Ending()
        with self.signals:
            try:
                if self.peers.elastic:
                    self.sampler.start("train", self.peers.node)  # seeds by node id: ranks change, ids do not
                    self.membership.enter()
                self._train()
            except (Exception, KeyboardInterrupt) as exc:  # a worker, a lost peer, a signal, a bug
                end.ended_by(exc)
            finally:
                summary = self._finish(end)
        end.raise_first()
        return summary

    def _finish(self, end: Ending) -> dict:
        """The end of a run, whatever ended it: stop the workers, agree on the parameters, write the
        final checkpoint (not after a failure: no final collective), wait for the writer's last
        evaluation round (after the collective: the other ranks need not wait for it) and write the
        summary; returns the summary. Each step runs under `end` (nodes.run.ending), whatever
        became of the one before (a failed checkpoint, a second Ctrl-C), and the processes are
        stopped however it ends: none outlives the node."""
        self.train_seconds = self.stats.seconds
        finished, learners = end.finished, self.members.learners
        try:
            if not (finished and self.record.is_writer):  # a round in flight is dropped
                end.step("stopping the evaluator", self.evaluation.close)
            end.step("stopping the workers", lambda: self.sampler.stop(keep_janitor=True))
            sums = None  # the final collective before the checkpoint, so that a failed write fails the writer alone
            if end.ranks_together:
                faults.at("final_collective")
                sums = end.step("the final parameter check", lambda: checksums(self, True))
            if end.keeps_parameters(learned=learners[0].version > 0, solo=self.world == 1):
                faults.at("final_checkpoint")
                end.step("the final checkpoint", lambda: self.record.checkpoint(self._checkpoint_state(), wait=True))
            if sums is None:  # without one, the summary names no checksum
                sums = end.step("this rank's checksums", lambda: checksums(self, collective=False)) \
                    or [[] for _ in learners]
            if finished and self.record.is_writer:  # a round dropped is a warning, not the run's end
                end.step("the last evaluation round", lambda: self.evaluation.finish(
                    self.record, self.cfg.sync.timeout_s, lambda: self.signals.received is not None))
            # where its figures failed: the outcome alone
            summary = end.step("the summary's figures", lambda: run_summary(self, end.outcome, sums)) \
                or dict(outcome=end.outcome)
            end.step("the summary", lambda: self.record.summary(summary))
            if self.peers.elastic and self.record.is_writer and end.over_for_all:
                end.step("marking the run over", lambda: self.peers.mark_over(end.outcome))
        finally:
            end.step("stopping the evaluator", self.evaluation.close)
            end.step("stopping the workers", lambda: self.sampler.stop(keep_janitor=True))  # a no-op if stopped
            end.step("the last checkpoint written off the loop", self.record.close)  # a non-daemon thread's
            end.step("releasing the janitor", self.sampler.release_janitor)
        shown = {k: v for k, v in summary.items() if k != "param_checksums"}
        log.info("run %s: %s", end.outcome, json.dumps(shown))
        return summary
