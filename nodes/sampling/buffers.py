"""Preallocated shared-memory buffers and the index bookkeeping around them.

Trajectory slots: each holds one env's rollout of T steps (T+1 observations: the last one is the
bootstrap observation and is also the first of the env's next slot). Rollout workers write
observations, rewards and dones; policy workers write actions, log-probs, values, the policy
version and the slot's initial hidden state; the learner copies whole slots out and returns them
to the free list. Only slot numbers and env-group numbers travel through queues.

Per-env "cursor" tensors say which slot and step each env is at, so a policy-worker request is
just (worker, group). All tensors are torch shared memory (file-descriptor strategy: the /dev/shm
name is unlinked at creation, so nothing is left behind even on SIGKILL).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nodes.config.layout import num_slots
from nodes.record.profile import MAX_PHASES, table_rows

_TORCH_DTYPE = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


@dataclass
class TrajectoryBuffers:
    obs: torch.Tensor  # [S, T+1, *obs_shape]
    meas: torch.Tensor  # [S, T+1, M] float32 measurements (M = 0 when the env has none)
    # [S, T, A] float32, A = spec.action_width: each discrete head's action (a small integer, exact
    # in float32), then each continuous dim's unclipped sample; one dtype so one row holds both
    actions: torch.Tensor
    logp: torch.Tensor  # [S, T] behaviour log-prob of the action
    values: torch.Tensor  # [S, T] behaviour value estimate
    rewards: torch.Tensor  # [S, T] scaled training reward
    dones: torch.Tensor  # [S, T] episode ended after this step
    # [S, T] the episode ended there by a time limit, not by the task (the env said `truncated`):
    # the learner may bootstrap from the value there (algo.value_bootstrap)
    timeouts: torch.Tensor
    versions: torch.Tensor  # [S, T] policy version that chose the action
    h0: torch.Tensor  # [S, H] recurrent state before step 0 (H = model.state_size)
    slot_env: torch.Tensor  # [S] int64: the env (index in the rank) filling the slot
    # [S] int64: that env's rollouts before this one, this launch (rounds: nodes.sampling.batcher)
    slot_round: torch.Tensor
    # [S] int64: steps in the finished slot: T, or fewer when sync mode preempted it or (a population)
    # the env's member changed at an episode's end (the steps after it are not trained on)
    slot_len: torch.Tensor
    slot_policy: torch.Tensor  # [S] int64: the population member whose trajectory the slot holds (0: one policy)
    # [S, T, U] U(0,1) draws that decide the actions (U = spec.uniform_width: the discrete heads'
    # sizes summed, plus one per continuous dim) in sampler.mode=deterministic, written by the
    # env's rollout worker from the env's own stream; U = 0 otherwise
    uniforms: torch.Tensor
    # per env
    env_slot: torch.Tensor  # [E] int64: slot the env is writing
    env_t: torch.Tensor  # [E] int64: step inside that slot
    env_h: torch.Tensor  # [E, H]: current hidden state (policy worker writes, rollout worker zeroes)
    env_policy: torch.Tensor  # [E] int64: the member playing the env (rollout worker writes, policy workers route)

    @property
    def num_slots(self) -> int:
        return self.obs.shape[0]

    @property
    def rollout(self) -> int:
        return self.rewards.shape[1]


def allocate(spec, sampler_cfg, state_size: int, members: int = 1) -> TrajectoryBuffers:
    s, t = num_slots(sampler_cfg, members), sampler_cfg.rollout
    e = sampler_cfg.num_workers * sampler_cfg.envs_per_worker

    def shared(*shape, dtype=torch.float32):
        return torch.zeros(shape, dtype=dtype).share_memory_()

    return TrajectoryBuffers(
        obs=shared(s, t + 1, *spec.obs_shape, dtype=_TORCH_DTYPE[np.dtype(spec.obs_dtype)]),
        meas=shared(s, t + 1, spec.meas_size),
        actions=shared(s, t, spec.action_width),
        logp=shared(s, t),
        values=shared(s, t),
        rewards=shared(s, t),
        dones=shared(s, t, dtype=torch.bool),
        timeouts=shared(s, t, dtype=torch.bool),
        versions=shared(s, t, dtype=torch.int64),
        h0=shared(s, state_size),
        slot_env=shared(s, dtype=torch.int64),
        slot_round=shared(s, dtype=torch.int64),
        slot_len=shared(s, dtype=torch.int64),
        slot_policy=shared(s, dtype=torch.int64),
        uniforms=shared(s, t, spec.uniform_width if sampler_cfg.mode == "deterministic" else 0),
        env_slot=shared(e, dtype=torch.int64),
        env_t=shared(e, dtype=torch.int64),
        env_h=shared(e, state_size),
        env_policy=shared(e, dtype=torch.int64),
    )


def env_groups(sampler_cfg) -> list[list[list[int]]]:
    """Global env ids per [worker][group]. Two equal groups when double-buffered, else one."""
    k = sampler_cfg.envs_per_worker
    n_groups = 2 if sampler_cfg.double_buffered else 1
    per = k // n_groups
    return [
        [[w * k + g * per + i for i in range(per)] for g in range(n_groups)]
        for w in range(sampler_cfg.num_workers)
    ]


class SlotBatch:
    """A learner batch copied out of the shared slots (so the slots can be reused at once)."""

    FIELDS = ("obs", "meas", "actions", "logp", "values", "rewards", "dones", "timeouts", "versions", "h0")

    def __init__(self, **fields: torch.Tensor):
        if "timeouts" not in fields:  # a batch made by hand: no time limits in it
            fields["timeouts"] = torch.zeros_like(fields["dones"])
        for name in self.FIELDS:
            setattr(self, name, fields[name])
        self.num_samples = self.rewards.numel()
        self.ready = None  # a CUDA event when the batch is still being copied to the device (DeviceFeed)
        self.slots: list[int] = []  # the trajectory slots it was copied from (Batcher)
        # [B] int64 on the host: steps to train on in each trajectory (None: all); fewer where a
        # population member's episode ended and the env changed member (the rest is another's)
        self.lengths: torch.Tensor | None = None

    def valid_mask(self) -> torch.Tensor | None:
        """[B, T] bool on the batch's device, or None when every step counts (read on the host, like
        `versions`: no device sync)."""
        T = self.rewards.shape[1]
        if self.lengths is None or int(self.lengths.min()) >= T:
            return None
        mask = torch.arange(T)[None, :] < self.lengths[:, None]
        return mask.to(self.rewards.device, non_blocking=True)

    @property
    def valid_samples(self) -> int:
        T = self.rewards.shape[1]
        return self.num_samples if self.lengths is None else int(self.lengths.clamp(max=T).sum())

    @classmethod
    def copy_slots(cls, buffers: TrajectoryBuffers, slots: list[int]) -> SlotBatch:
        idx = torch.as_tensor(slots, dtype=torch.int64)
        return cls(**{name: getattr(buffers, name).index_select(0, idx) for name in cls.FIELDS})

    def select(self, trajectories: torch.Tensor) -> SlotBatch:
        """The batch of these trajectories (a minibatch: algo.minibatches), on the same device."""
        on_host = trajectories.cpu()
        part = SlotBatch(**{name: getattr(self, name).index_select(
            0, on_host if name == "versions" else trajectories.to(getattr(self, name).device))
            for name in self.FIELDS})
        part.lengths = None if self.lengths is None else self.lengths.index_select(0, on_host)
        return part

    def truncate(self, steps: int) -> SlotBatch:
        """Keep the first `steps` steps of every trajectory (and the observation after the last,
        the bootstrap): a round cut short by DD-PPO's preemption (sampler.mode=sync)."""
        if steps < self.rewards.shape[1]:
            for name in self.FIELDS:
                if name != "h0":
                    t = getattr(self, name)
                    setattr(self, name, t[:, : steps + 1 if name in ("obs", "meas") else steps].contiguous())
            self.num_samples = self.rewards.numel()
        return self

    def to(self, device: torch.device) -> SlotBatch:
        """Everything but `versions` (read on the host: the policy lag) on `device`."""
        if self.ready is not None:  # copied on the batcher's stream: make this stream wait for it
            stream = torch.cuda.current_stream(device)
            stream.wait_event(self.ready)
            for name in self.FIELDS:
                t = getattr(self, name)
                if t.device.type == "cuda":
                    t.record_stream(stream)  # allocated on the side stream, used on this one
            self.ready = None
        if device.type != "cpu":
            for name in self.FIELDS:
                if name != "versions":
                    setattr(self, name, getattr(self, name).to(device, non_blocking=True))
        return self


@dataclass
class Control:
    """Tiny shared state: the stop flag, per-worker env-step counters and the phase-time table
    (one writer per entry), and the policy version the workers started at (a constant: the env
    and action streams' key)."""

    stop: torch.Tensor  # [1] int64, nonzero = every worker leaves its loop
    worker_steps: torch.Tensor  # [W] int64, agent steps taken by rollout worker w
    # [1] int64, in rounds (sync, deterministic): rounds whose slots the learner gave back (one
    # writer: the batcher); env e may begin its round r once r < released + slots per env
    rounds_released: torch.Tensor
    # [1] int64, sync mode with several nodes: the round the other ranks finished first (DD-PPO's
    # preemption): its rollouts end at the next step past sync.min_batch_frac of T; -1: none
    cut_round: torch.Tensor
    # [rows, MAX_PHASES] float64: seconds per phase of every process (nodes.record.profile, one writer per row)
    profile: torch.Tensor
    start_version: int = 0
    # [P, K] float32: each population member's reward-shaping weights (env.shaping, then env.pickups;
    # K = 0 without a population or shaping): PBT mutates them, the rollout workers weigh the env's
    # reported changes by the playing member's row
    shaping: torch.Tensor | None = None
    # [1] int64: self-play snapshots (population.snapshots) that exist so far, at most their slots;
    # the node writes it, the rollout workers draw snapshot seats from it
    snapshots: torch.Tensor | None = None

    @classmethod
    def create(cls, num_workers: int, start_version: int = 0, num_policy_workers: int = 1,
               shaping: torch.Tensor | None = None) -> Control:
        rows = len(table_rows(num_policy_workers, num_workers))
        return cls(torch.zeros(1, dtype=torch.int64).share_memory_(),
                   torch.zeros(num_workers, dtype=torch.int64).share_memory_(),
                   torch.zeros(1, dtype=torch.int64).share_memory_(),
                   torch.full((1,), -1, dtype=torch.int64).share_memory_(),
                   torch.zeros(rows, MAX_PHASES, dtype=torch.float64).share_memory_(), start_version,
                   (shaping if shaping is not None else torch.zeros(1, 0)).float().share_memory_(),
                   torch.zeros(1, dtype=torch.int64).share_memory_())
