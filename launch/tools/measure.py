"""The benchmark's measurement of one phase of a node's layout (launch.bench).

`measure(cfg, phase, seconds, warmup_s)` builds a node (nodes.node.Node: the same placement, workers
and learners as training) and runs one phase after a warm-up: "simulate" (rollout workers with
random actions: no inference, no learning), "sample" (the full sampler, trajectories discarded) or
"train" (the sampler and the learners). It returns the frames/s the envs COLLECTED (agent steps x
frameskip; the same count in every phase, so phases compare) and, for "train", the frames/s the
learners TRAINED on (what summary.json's `fps` counts), where the processes' time went
(nodes.record.profile), the CPU cores they kept busy and the node's peak memory (nodes.record.memory).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from nodes.node import Node
from nodes.record import profile
from nodes.record.memory import MemoryWatch, Sample
from nodes.record.profile import LEARNER

WAIT = LEARNER.index("wait")


@dataclass
class Measured:
    """What `measure` found for one phase."""

    fps: float  # env frames/s collected over the measured seconds
    trained_fps: float  # env frames/s the learners trained on ("train" only, else 0)
    profile: dict  # {process kind: {phase: share of its time}} (nodes.record.profile.shares)
    cores: dict  # {main | policy | rollout: CPU cores those processes kept busy} (nodes.record.profile.cpu_by_kind)
    memory: Sample  # the node's peak memory sample (nodes.record.memory)
    shared_bytes: int  # the node's own shared buffers (WorkerPool.shared_bytes)


class Window:
    """The measured seconds: opened after the warm-up (a slow first step may overrun it: the window
    still lasts `seconds`), the counters read at both ends."""

    def __init__(self, node: Node, seconds: float, warmup_s: float):
        self.node, self.seconds = node, seconds
        self.t_warm, self.t0, self.t_end = time.time() + warmup_s, None, math.inf
        self.trained = 0  # samples the learners trained on inside the window

    def tick(self, now: float) -> None:
        pool = self.node.sampler.pool
        if self.t0 is None and now >= self.t_warm:
            self.t0, self.steps0, self.t_end = now, pool.worker_steps, now + self.seconds
            self.table0, self.cpu0 = pool.control.profile.numpy().copy(), profile.cpu_by_kind(pool)

    def result(self, now: float, watch: MemoryWatch) -> Measured:
        node, s = self.node, self.node.cfg.sampler
        pool, fs, dt = node.sampler.pool, node.cfg.env.frameskip, now - self.t0
        split = profile.shares(self.table0, pool.control.profile.numpy().copy(),
                               profile.table_rows(s.num_policy_workers, s.num_workers))
        cpu1 = profile.cpu_by_kind(pool)
        cores = {k: round((cpu1[k] - self.cpu0[k]) / dt, 2) for k in cpu1}
        watch.stop()
        return Measured((pool.worker_steps - self.steps0) * fs / dt, self.trained * fs / dt, split, cores,
                        watch.peak(), pool.shared_bytes)


def measure(cfg, phase: str, seconds: float, warmup_s: float) -> Measured:
    node = Node(cfg, is_writer=False)
    sampler = node.sampler
    watch = MemoryWatch(every_s=1.0)
    with node.signals:
        try:
            sampler.start(phase, node.rank)
            watch.start()
            window = Window(node, seconds, warmup_s)
            while True:
                now = time.time()
                window.tick(now)
                if now >= window.t_end:
                    return window.result(now, watch)
                node.members.learners[0].clock(WAIT)
                node.idle()
                if phase == "simulate":
                    time.sleep(0.05)  # nothing to wait for but the clock
                    continue
                for p, batcher in enumerate(sampler.batchers):  # one, or a population's
                    batch = batcher.get_full(timeout=0.05 / len(sampler.batchers))
                    if batch is None:
                        continue
                    if phase != "train":
                        batcher.release(batch)
                        continue
                    sampler.learn([batch if q == p else None for q in range(len(sampler.batchers))], False)
                    window.trained += batch.valid_samples if window.t0 is not None else 0
        finally:
            if watch.samples:
                watch.stop()
            sampler.stop()
