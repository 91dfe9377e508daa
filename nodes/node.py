"""A node: rollout workers + policy workers (processes) and the learner (this process).

`Node(cfg).run()` trains until a stop condition, a signal or a failure, then stops every
process, writes a final checkpoint and returns the run summary. `Node(cfg).measure(phase, s)`
runs the same layout without learning ("sample") or without inference ("simulate") for the
benchmark. Everything that crosses machines goes through `peers` (nodes.peers.Solo for one
node; sync/ supplies the multi-node one), so this module knows nothing of other nodes.

Every training iteration calls the peers at the same points on every rank: batch ready (or
cut short because the others are ready), gradient reduction, observation-statistics sum, a
small stats gather (which also carries each rank's wish to stop, so all ranks stop at the same
iteration), and every `sync.check_every` iterations a parameter-checksum comparison.
"""
from __future__ import annotations

import copy
import json
import math
import logging
import os
import queue
import signal
import threading
import time
from multiprocessing import resource_tracker
from typing import List, Optional

import torch

from nodes import checkpoint as ckpt
from nodes.buffers import Control, allocate
from nodes.config import cpu_count
from nodes.envs import env_spec
from nodes.learner import Batcher, Learner
from nodes.models import ActorCritic, param_checksum
from nodes.peers import Solo
from nodes.policy_worker import run_policy_worker
from nodes.processes import Channels, spawn, start_janitor, stop_janitor
from nodes.rollout_worker import run_rollout_worker
from nodes.stats import ELAPSED, EPISODES, PARTIAL, SAMPLES, STOP, SYNC_S, RunStats, TensorBoard, merged_reward
from nodes.weights import SharedWeights

log = logging.getLogger("nodes")


class WorkerFailed(RuntimeError):
    """A worker process died or raised; the message names it."""


class Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Node:
    # Signals that stop the run after the current step (a stop vote with several nodes). A
    # launcher may add one (launch.slurm adds Slurm's preemption signal). Workers start with these
    # blocked: Slurm signals every process of a job step, and only this process decides to stop.
    stop_signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, cfg, peers=None, is_writer: Optional[bool] = None):
        self.peers = peers or Solo()
        self.rank, self.world = self.peers.rank, self.peers.world_size
        self.is_writer = self.peers.is_writer if is_writer is None else is_writer
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        # What the workers see: env and sampling seeds offset by rank; the artificial step delay
        # (tests of slow nodes) only on env.slow_rank when that is set.
        self.worker_cfg = copy.deepcopy(cfg)
        self.worker_cfg.seed = cfg.seed + 100_003 * self.rank
        if cfg.env.slow_rank >= 0 and cfg.env.slow_rank != self.rank:
            self.worker_cfg.env.step_delay_s = 0.0
        self.spec = env_spec(cfg.env)
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.train.learner_threads or cpu_count())
        # The learner runs on train.device; policy workers run on the CPU and receive the weights
        # through shared memory (SharedWeights copies them off the device after each step).
        self.model = ActorCritic(self.spec, cfg.model).to(torch.device(cfg.train.device))
        self.learner = Learner(self.model, cfg.algo, self.peers)
        self.stats = RunStats()
        self.resumed_from: Optional[str] = None
        self._signal: Optional[int] = None
        # With several nodes a signal is a vote to stop at the end of the current iteration
        # (all ranks must leave the lockstep loop together), not an immediate exception.
        self._vote_stop = False

    # ----------------------------------------------------------------- resume / checkpoints
    def restore(self) -> None:
        path = ckpt.latest(self.run_dir)
        if path is None:
            return
        state = ckpt.load(path)
        try:
            self.learner.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise ckpt.CheckpointError(f"checkpoint {path} does not fit this model/config: {first}") from None
        # frames are global (every rank counts all of them); episodes and recent rewards were
        # merged over ranks when saved, so only rank 0 takes them back
        mine = self.rank == 0
        self.stats = RunStats(int(state["env_frames"]), int(state["episodes"]) if mine else 0,
                              state["recent_rewards"] if mine else ())
        self.resumed_from = path
        log.info("resumed from %s: %d env frames, policy version %d", path, self.stats.env_frames,
                 self.learner.version)

    def save_checkpoint(self) -> None:
        if not self.is_writer:
            return
        state = self.learner.state_dict()
        rows = getattr(self, "rank_rows", None)
        episodes = int(sum(row[EPISODES] for row in rows)) if rows else self.stats.episodes
        state.update(env_frames=self.stats.env_frames, episodes=episodes, recent_rewards=list(self.stats.rewards))
        path = ckpt.save(self.run_dir, state, self.cfg.train.keep_checkpoints)
        log.info("checkpoint %s", path)

    # ----------------------------------------------------------------- processes
    def _start(self, phase: str) -> None:
        cfg, s = self.worker_cfg, self.cfg.sampler
        self.control = Control.create(s.num_workers)
        self.channels = Channels.create(s.num_workers)
        self.buffers = allocate(self.spec, s, self.model.state_size)
        self.weights = SharedWeights(self.model)
        self.weights.publish(self.model, self.learner.version)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, self.stop_signals)  # the children inherit the mask
        try:
            resource_tracker.ensure_running()  # starting it unblocks SIGINT/SIGTERM here: block again
            signal.pthread_sigmask(signal.SIG_BLOCK, self.stop_signals)
            self.janitor = start_janitor()
            pgid = self.janitor.pid
            self.procs = []
            ch = self.channels
            if phase != "simulate":
                for i in range(s.num_policy_workers):
                    self.procs.append(spawn(run_policy_worker, f"policy worker {i}", pgid, None, ch.reports,
                                            cfg, i, self.spec, self.buffers, ch, self.control, self.weights))
                ch.free_slots.put_many(list(range(self.buffers.num_slots)))
            ncpu = sorted(os.sched_getaffinity(0))
            for w in range(s.num_workers):
                cpu = ncpu[(s.pin_offset + w) % len(ncpu)] if s.pin_workers else None
                self.procs.append(spawn(run_rollout_worker, f"rollout worker {w}", pgid, cpu, ch.reports,
                                        cfg, w, self.buffers, ch, self.control, phase == "simulate"))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # signals that came meanwhile arrive now
        self.batch_stop = threading.Event()
        self.batcher = None
        if phase != "simulate":
            self.batcher = Batcher(self.buffers, ch, s.batch_size // s.rollout, self.batch_stop)
            self.batcher.start()
        self._await_ready(s.num_workers + (s.num_policy_workers if phase != "simulate" else 0))

    def _await_ready(self, n: int, timeout: float = 300.0) -> None:
        deadline = time.time() + timeout
        ready = 0
        while ready < n:
            if time.time() > deadline:
                raise WorkerFailed(f"workers not ready after {timeout:.0f} s ({ready}/{n})")
            ready += sum(1 for m in self._drain_reports() if m[0] == "ready")
            self._check_alive()

    def _drain_reports(self):
        try:
            msgs = self.channels.reports.get_many(timeout=0.05)
        except queue.Empty:
            return []
        for m in msgs:
            if m[0] == "episode":
                self.stats.add_episode(m[1], m[2])
            elif m[0] == "error":
                raise WorkerFailed(f"{m[1]} crashed:\n{m[2].rstrip()}")
        return msgs

    def _check_alive(self) -> None:
        for p in self.procs:
            if p.exitcode is not None and not self.control.stop[0]:
                self._drain_reports()  # prefer the worker's own traceback if it sent one
                raise WorkerFailed(f"{p.name} exited unexpectedly (exit code {p.exitcode})")
        if self._signal is not None and not self._vote_stop:
            raise Stopped(self._signal)

    def _stop(self) -> None:
        if not hasattr(self, "control"):
            return
        self.control.stop[0] = 1
        self.batch_stop.set()
        deadline = time.time() + 15
        for p in self.procs:
            p.join(max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                log.warning("%s did not stop in time; killing it", p.name)
                p.kill()
                p.join(5)
        if self.batcher is not None:
            self.batcher.join(5)
        stop_janitor(self.janitor)

    def _on_signal(self, signum, frame) -> None:
        if self._signal is not None:  # second Ctrl-C: stop waiting for a clean shutdown
            raise KeyboardInterrupt
        self._signal = signum
        log.warning("received %s: stopping after the current step", signal.Signals(signum).name)

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in self.stop_signals}

    # ----------------------------------------------------------------- training
    def _next_batch(self):
        """A full local batch, or what this node has once the others are ready (straggler)."""
        sc = self.cfg.sync
        min_slots = math.ceil(sc.min_batch_frac * self.cfg.sampler.batch_size / self.cfg.sampler.rollout)
        version = self.learner.version
        while True:
            t0 = time.perf_counter()
            # with peers, poll often: a late look at their readiness is time they spend waiting
            batch = self.batcher.get_full(timeout=0.002 if self.world > 1 else 0.05)
            if batch is not None:
                self.peers.mark_ready(version)
                return batch
            if sc.straggler and self.peers.others_ready(version):
                batch = self.batcher.take_partial(min_slots)
                if batch is not None:
                    self.partial_batches += 1
                    return batch
            self.batch_wait_s += time.perf_counter() - t0
            self._drain_reports()
            self._check_alive()

    def _share_stats(self, train: dict, stop: bool) -> bool:
        """One small gather per iteration: per-rank figures for rank 0, and the stop vote."""
        st = self.stats
        r = st.mean_reward()
        mine = [float(train["local_samples"]), train["sync_s"], train["step_s"], train["policy_lag_mean"],
                float(st.episodes), math.nan if r is None else r, float(len(st.rewards)), float(stop),
                float(self.partial_batches), st.seconds]
        rows = self.peers.gather_stats(mine)
        self.rank_rows = rows
        self.rank_samples = [a + row[SAMPLES] for a, row in zip(self.rank_samples or [0.0] * len(rows), rows)]
        self.rank_sync_s = [a + row[SYNC_S] for a, row in zip(self.rank_sync_s or [0.0] * len(rows), rows)]
        return any(row[STOP] for row in rows)

    def _stop_wanted(self) -> bool:
        t = self.cfg.train
        if self._signal is not None:
            return True
        if t.max_env_frames and self.stats.env_frames >= t.max_env_frames:
            return True
        return bool(t.max_seconds and self.stats.seconds >= t.max_seconds)

    def run(self) -> dict:
        """Train; returns the summary (also written to run_dir/summary.json by the writer)."""
        cfg, t = self.cfg, self.cfg.train
        os.makedirs(self.run_dir, exist_ok=True)
        self.restore()
        self.peers.start(self.model, self.learner.optimizer)
        old = self._install_signals()
        tb = TensorBoard(os.path.join(self.run_dir, "tb")) if self.is_writer else None
        outcome, error = "finished", None
        frames_per_sample = cfg.env.frameskip
        self.partial_batches, self.batch_wait_s, self.sync_s_total = 0, 0.0, 0.0
        self.rank_rows: List[List[float]] = []
        self.rank_samples: List[float] = []  # samples each rank contributed this launch
        self.rank_sync_s: List[float] = []  # seconds each rank spent in the gradient all-reduce
        try:
            self._start("train")
            self.stats.start_time = time.time()
            self.stats.start_frames = self.stats.env_frames
            next_status = time.time() + t.status_every_s
            next_ckpt = time.time() + t.checkpoint_every_s
            log.info("training: %d rollout workers x %d envs, %d policy worker(s), batch %d, rollout %d%s",
                     cfg.sampler.num_workers, cfg.sampler.envs_per_worker, cfg.sampler.num_policy_workers,
                     cfg.sampler.batch_size, cfg.sampler.rollout,
                     f", rank {self.rank} of {self.world}" if self.world > 1 else "")
            self._vote_stop = self.world > 1
            stop = self._stop_wanted()
            while not stop:
                batch = self._next_batch()
                train = self.learner.train_step(batch)
                self.weights.publish(self.model, self.learner.version)
                self._drain_reports()
                self.stats.add_frames(train["global_samples"] * frames_per_sample)
                self.sync_s_total += train["sync_s"]
                train.update(version=self.learner.version, local_samples=batch.num_samples)
                self.stats.last_train = train
                # every rank votes each iteration, so all stop after the same one
                stop = self._share_stats(train, self._stop_wanted())
                if self.world > 1 and self.learner.version % cfg.sync.check_every == 0:
                    self.peers.check_agreement(self.model, self.learner.version)
                if tb:
                    tb.write(self.stats, train, self.rank_rows)
                now = time.time()
                if now >= next_status:
                    next_status = now + t.status_every_s
                    if self.is_writer:
                        log.info(self.stats.status_line(self.rank_rows))
                if now >= next_ckpt:
                    next_ckpt = now + t.checkpoint_every_s
                    self.save_checkpoint()
            self._vote_stop = False
            if self._signal is not None:
                raise Stopped(self._signal)
        except Stopped as exc:
            outcome, error = f"stopped by {exc}", exc
        except KeyboardInterrupt as exc:
            outcome, error = "interrupted", exc
        except WorkerFailed as exc:
            outcome, error = "failed", exc
            log.error("%s", exc)
        except Exception as exc:  # a lost peer (sync/ raises) or a bug: no final collective
            outcome, error = "failed", exc
            log.error("%s", str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        finally:
            seconds = self.stats.seconds
            self._stop()
            for sig, h in old.items():
                signal.signal(sig, h)
            if outcome != "failed" or (self.learner.version > 0 and self.world == 1):
                self.save_checkpoint()
            summary = self.summary(seconds, outcome, collective=outcome != "failed")
            if tb:
                tb.close()
            log.info("run %s: %s", outcome, json.dumps({k: v for k, v in summary.items() if k != "param_checksums"}))
        if error is not None:
            raise error
        return summary

    def summary(self, seconds: float, outcome: str, collective: bool = True) -> dict:
        st = self.stats
        # after a failure a peer may be gone: no collective, only this rank's checksum
        checksums = self.peers.check_agreement(self.model, -1) if collective else [param_checksum(self.model)]
        r = st.mean_reward()
        rows = self.rank_rows or [[0, 0, 0, 0, st.episodes, math.nan if r is None else r, len(st.rewards), 0,
                                   self.partial_batches, seconds]]
        reward = merged_reward(rows)
        summary = dict(
            env_frames=st.env_frames, seconds=round(seconds, 3),
            fps=round((st.env_frames - st.start_frames) / max(seconds, 1e-9), 1),
            episodes=int(sum(row[EPISODES] for row in rows)), mean_episode_reward=reward,
            policy_version=self.learner.version, nodes=self.world, param_checksums=checksums,
            outcome=outcome, resumed_from=self.resumed_from,
            policy_lag_mean=st.last_train.get("policy_lag_mean"),
            sync_share=round(self.sync_s_total / max(seconds, 1e-9), 4),
            partial_batches=int(sum(row[PARTIAL] for row in rows)),  # all ranks: batches cut short
            samples_per_rank=[int(x) for x in self.rank_samples],
            # each rank's all-reduce time over its own training time (ranks start their clocks apart)
            sync_share_per_rank=[round(x / max(row[ELAPSED], 1e-9), 4) for x, row in zip(self.rank_sync_s, rows)],
        )
        if self.is_writer:
            path = os.path.join(self.run_dir, "summary.json")
            with open(path + ".tmp", "w") as f:
                json.dump(summary, f, indent=2)
            os.replace(path + ".tmp", path)
        return summary

    # ----------------------------------------------------------------- benchmark phases
    def measure(self, phase: str, seconds: float, warmup_s: float) -> float:
        """Env frames/s of one phase: "simulate", "sample" or "train", after a warm-up."""
        old = self._install_signals()
        fs = self.cfg.env.frameskip
        try:
            self._start(phase)
            t_end = time.time() + warmup_s + seconds
            t0 = None
            while True:
                now = time.time()
                if t0 is None and now >= t_end - seconds:
                    t0, s0 = now, int(self.control.worker_steps.sum())
                if now >= t_end:
                    return (int(self.control.worker_steps.sum()) - s0) * fs / (now - t0)
                self._drain_reports()
                self._check_alive()
                if phase == "simulate":
                    time.sleep(0.05)
                    continue
                batch = self.batcher.get_full(timeout=0.05)
                if batch is not None and phase == "train":
                    self.learner.train_step(batch)
                    self.weights.publish(self.model, self.learner.version)
        finally:
            self._stop()
            for sig, h in old.items():
                signal.signal(sig, h)
