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

Every training iteration calls the peers at the same points on every rank: batch ready (or cut
short because the others are ready), gradient reduction, observation-statistics sum, a small
stats gather (which also carries each rank's wish to stop, so all ranks stop after the same
iteration), and every `sync.check_every` iterations a parameter-checksum comparison.
"""
from __future__ import annotations

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
from nodes import profile, seeds
from nodes.batcher import Batcher, wait_for_batch
from nodes.buffers import SlotBatch
from nodes.config import in_rounds, slots_per_batch
from nodes.envs import env_spec
from nodes.errors import CheckpointError, Stopped, one_line
from nodes.learner import Learner
from nodes.memory import MemoryWatch, Sample
from nodes.models import ActorCritic, deterministic_kernels, param_checksum
from nodes.peers import Peers, Solo
from nodes.placement import Placement, apply, here, use_device
from nodes.processes import WorkerPool
from nodes.profile import LEARNER, LEARNER_ROW, Clock
from nodes.signals import DEFAULT as DEFAULT_STOP_SIGNALS
from nodes.signals import StopSignals
from nodes.stats import RankRow, RankStats, RunStats, TensorBoard, merged_match, merged_reward

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
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.is_writer = self.peers.is_writer if is_writer is None else is_writer
        self.run_dir = cfg.run_dir
        self.placement = placement or here(cfg, solo=self.world == 1)
        apply(cfg, self.placement)
        if cfg.sampler.mode == "deterministic":
            deterministic_kernels()  # before CUDA starts; the workers inherit the environment
        use_device(cfg.train.device)
        self.signals = StopSignals(stop_signals)
        self.spec = env_spec(cfg.env)
        torch.manual_seed(seeds.derive(cfg.seed, seeds.MODEL_INIT))
        torch.set_num_threads(cfg.train.learner_threads)
        # The learner runs on train.device, the policy workers on sampler.policy_device; they get
        # the weights through SharedWeights (on the policy workers' device: CUDA IPC on a GPU).
        self.model = ActorCritic(self.spec, cfg.model).to(torch.device(cfg.train.device))
        self.learner = Learner(self.model, cfg.algo, self.peers, cfg.train.precision)
        self.stats = RunStats()
        self.ranks = RankStats()
        self.resumed_from: str | None = None
        self.pool: WorkerPool | None = None
        self.batcher: Batcher | None = None
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
        try:
            self.learner.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit this model/config: {one_line(exc)}") from None
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
        state = self.learner.state_dict()
        rows = self.ranks.rows
        episodes = int(sum(row.episodes for row in rows)) if rows else self.stats.episodes
        state.update(env_frames=self.stats.env_frames, episodes=episodes, recent_rewards=list(self.stats.rewards),
                     recent_matches=[dict(m) for m in self.stats.matches])
        path = ckpt.save(self.run_dir, state, self.cfg.train.keep_checkpoints)
        log.info("checkpoint %s", path)

    # ----------------------------------------------------------------- processes
    def _start(self, phase: str) -> None:
        s = self.cfg.sampler
        self.pool = WorkerPool(self.cfg, self.rank, self.spec, self.model, self.signals, self.stats.add_episode,
                               self.placement.worker_cores, start_version=self.learner.version)
        self.pool.weights.publish(self.model, self.learner.version)
        self.learner.clock = Clock(self.pool.control.profile.numpy()[LEARNER_ROW])
        self.pool.start(phase)
        if phase != "simulate":
            self.batcher = Batcher(self.pool.buffers, self.pool.channels, slots_per_batch(s), self.batch_stop,
                                   self.learner.device, rounds=in_rounds(s),
                                   control=self.pool.control)
            self.batcher.start()

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
        if self.batcher is not None:
            self.batcher.join(5)

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
        whether it was the last, whether the stats rows were gathered after it)."""
        cfg = self.cfg
        self.learner.clock(WAIT)
        batch, partial = wait_for_batch(self.batcher, self.peers, self.learner.version, cfg.sync.straggler,
                                           min_slots, self._idle)
        self.partial_batches += partial
        # the vote rides in the gradient all-reduce: every rank learns every rank's vote from it
        train = self._learn(batch, self._stop_vote())
        self.pool.poll(timeout=0.0)
        self.stats.add_frames(train["global_samples"] * cfg.env.frameskip)
        self.sync_s_total += train["sync_s"]
        self.samples_total += batch.num_samples
        train.update(version=self.learner.version, local_samples=batch.num_samples)
        self.stats.last_train = train
        last = bool(train["stop_voted"]) or self._frames_done()
        self.since_gather += 1
        # one node's "gather" is its own row, free: every iteration, so its curves keep every point
        gathered = last or self.world == 1 or self.learner.version % cfg.sync.stats_every == 0  # equal on every rank
        if gathered:
            mine = self.stats.row(samples=float(self.samples_total), sync_s=self.sync_s_total,
                                  partial=float(self.partial_batches), engine_restarts=float(self.pool.restarts))
            self.ranks.add([RankRow.from_floats(r) for r in self.peers.gather_stats(mine.to_floats())],
                           self.since_gather)
            self.since_gather = 0
        if self.world > 1 and self.learner.version % cfg.sync.check_every == 0:
            self.peers.check_agreement(self.model, self.learner.version)
        return train, last, gathered

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
            self.pool.weights.publish(self.model, self.learner.version)
            self.batcher.release(self.held)
            self.held = batch
            train = self.learner.train_step(batch, stop)
        else:
            train = self.learner.train_step(batch, stop)
            clock(PUBLISH)
            self.pool.weights.publish(self.model, self.learner.version)
            self.batcher.release(batch)
        clock(STATS)
        return train

    def _train(self, tb: TensorBoard | None) -> None:
        """Start the workers, then iterate until every rank has voted to stop."""
        cfg, t, s = self.cfg, self.cfg.train, self.cfg.sampler
        min_slots = math.ceil(cfg.sync.min_batch_frac * slots_per_batch(s))
        self._start("train")
        self.stats.start_time = time.time()
        self.stats.start_frames = self.stats.env_frames
        next_status = time.time() + t.status_every_s
        next_ckpt = time.time() + t.checkpoint_every_s
        log.info("training: %d rollout workers x %d envs, %d policy worker(s), learner %d thread(s), batch %d, "
                 "rollout %d, %s%s", s.num_workers, s.envs_per_worker, s.num_policy_workers, torch.get_num_threads(),
                 s.batch_size, s.rollout, t.precision, f", rank {self.rank} of {self.world}" if self.world > 1 else "")
        self.signal_is_vote = self.world > 1
        stop = self._stop_wanted()
        while not stop:
            train, stop, gathered = self._iteration(min_slots)
            if tb:
                tb.write(self.stats, train, self.ranks if gathered else None)
            now = time.time()
            # the last iteration gets its line too: a short run still shows where it ended
            if now >= next_status or stop:
                next_status = now + t.status_every_s
                if self.is_writer:
                    log.info(self.stats.status_line(self.ranks.rows))
            if now >= next_ckpt:
                next_ckpt = now + t.checkpoint_every_s
                self.save_checkpoint()
        self.signal_is_vote = False
        if self.signals.received is not None:
            raise Stopped(self.signals.received)

    def run(self) -> dict:
        """Train; returns the summary (also written to run_dir/summary.json by the writer)."""
        os.makedirs(self.run_dir, exist_ok=True)
        self.restore()  # a checkpoint that does not fit: CheckpointError before anything started
        self.peers.start(self.model, self.learner.optimizer)
        tb = TensorBoard(os.path.join(self.run_dir, "tb")) if self.is_writer else None
        outcome, error = "finished", None
        with self.signals:
            try:
                self._train(tb)
            except Stopped as exc:
                outcome, error = f"stopped by {exc}", exc
            except KeyboardInterrupt as exc:
                outcome, error = "interrupted", exc
            except Exception as exc:  # a worker, a lost peer (sync/ raises) or a bug: no final collective
                outcome, error = "failed", exc
            finally:
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
                if tb:
                    tb.close()
                shown = {k: v for k, v in summary.items() if k != "param_checksums"}
                log.info("run %s: %s", outcome, json.dumps(shown))
        if error is not None:
            raise error
        return summary

    def summary(self, seconds: float, outcome: str, collective: bool = True) -> dict:
        st = self.stats
        # after a failure a peer may be gone: no collective, only this rank's checksum; with
        # several nodes the last agreed one (after an NCCL failure the GPU must not be touched)
        if collective:
            checksums = self.peers.check_agreement(self.model, -1)
        elif self.world > 1:
            checksums = [self.peers.last_checksum]
        else:
            checksums = [param_checksum(self.model)]
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
                    batch = self.batcher.get_full(timeout=0.05)
                    if batch is not None and phase == "train":
                        self._learn(batch)
                    elif batch is not None:
                        self.batcher.release(batch)
            finally:
                if watch.samples:
                    watch.stop()
                self._stop()


@dataclass
class Measured:
    """What `Node.measure` found for one phase."""

    fps: float  # env frames/s over the measured seconds
    profile: dict  # {process kind: {phase: share of its time}} (nodes.profile.shares)
    cores: dict  # {main | policy | rollout: CPU cores those processes kept busy} (nodes.profile.cpu_by_kind)
    memory: Sample  # the node's peak memory sample (nodes.memory)
    shared_bytes: int  # the node's own shared buffers (WorkerPool.shared_bytes)
