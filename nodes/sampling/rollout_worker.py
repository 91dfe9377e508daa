"""Rollout worker: one process (pinned to one core) stepping k envs in two alternating groups.

Double-buffered sampling (Sample Factory, Petrenko et al. 2020, section 3.1): while the policy
worker computes actions for group A, this process steps group B, so neither the CPU core nor the
policy worker waits. With `sampler.double_buffered=false` all k envs form one group and the worker
idles during inference.

Observations go straight into the env's current trajectory slot; only (worker, group) pairs and
finished slot numbers travel through the queues.
"""
from __future__ import annotations

import math
import queue
import time

import numpy as np

from nodes import seeds
from nodes.config.layout import in_rounds
from nodes.envs import action_converter, env_spec, env_workdir, make_envs
from nodes.population.assignment import Assignment
from nodes.record.profile import ROLLOUT, Clock, rollout_row
from nodes.sampling.buffers import env_groups

WAIT, ENV_STEP, BOOKKEEPING = (ROLLOUT.index(p) for p in ("wait", "env_step", "bookkeeping"))


class GroupStepper:
    """The bookkeeping of one worker's envs over the shared buffers (no processes, no queues).

    Kept apart from the process loop so the slot/step index logic is testable on its own.
    """

    def __init__(self, cfg, worker: int, buffers, channels, envs, control, rank: int = 0, clock: Clock | None = None):
        self.cfg, self.w, self.ch, self.envs, self.control, self.rank = cfg, worker, channels, envs, control, rank
        self.clock = clock or Clock()  # this process's phase split (nodes.record.profile)
        self.T = buffers.rollout
        self.k = cfg.sampler.envs_per_worker
        self.groups = env_groups(cfg.sampler)[worker]
        self.scale = cfg.env.reward_scale
        self.frameskip = cfg.env.frameskip  # env frames per step: episode lengths are reported in frames
        # numpy views of shared memory: scalar indexing is much cheaper than on torch tensors
        self.obs = buffers.obs.numpy()
        self.meas = buffers.meas.numpy()
        self.has_meas = self.meas.shape[-1] > 0  # then envs return (pixels, measurements)
        self.env_action = action_converter(envs[0].spec)  # a buffer row -> what env.step takes
        self.actions = buffers.actions.numpy()
        self.rewards = buffers.rewards.numpy()
        self.dones = buffers.dones.numpy()
        self.timeouts = buffers.timeouts.numpy()
        self.env_slot = buffers.env_slot.numpy()
        self.env_t = buffers.env_t.numpy()
        self.env_h = buffers.env_h.numpy()
        self.slot_env = buffers.slot_env.numpy()
        self.slot_round = buffers.slot_round.numpy()
        self.slot_len = buffers.slot_len.numpy()
        self.slot_policy = buffers.slot_policy.numpy()
        self.env_policy = buffers.env_policy.numpy()
        self.uniforms = buffers.uniforms.numpy()  # [S, T, 0] unless sampler.mode=deterministic
        self.steps = control.worker_steps.numpy()
        self.rounds = np.zeros(self.k, dtype=np.int64)  # rollouts each env has begun in this launch
        # In rounds (sync, deterministic) env e owns slots e, e + E, ... (one per round it may be
        # ahead of the learner) and takes them in turn; otherwise any free slot from the queue.
        self.park = in_rounds(cfg.sampler)
        self.num_envs = cfg.sampler.num_workers * self.k
        self.own_slots = buffers.num_slots // self.num_envs
        self.released = control.rounds_released.numpy()
        self.cut_round = control.cut_round.numpy()
        self.min_steps = max(1, math.ceil(cfg.sync.min_batch_frac * self.T))  # a preempted rollout's least
        self.parked: list = []  # (group, [(env, first observation)]) waiting for their next slots
        self.ep_return = np.zeros(self.k)
        self.ep_len = np.zeros(self.k, dtype=np.int64)
        self.lockstep = hasattr(envs[0], "submit")  # agents of matches between agents
        # a population (population.size > 1): which member plays each env, and each member's
        # shaping weights ([P, K], PBT mutates them; K = 0: the env's own training reward)
        self.assign = Assignment(cfg, rank, worker * self.k, self.k, control.start_version,
                                 control.snapshots.numpy() if control.snapshots is not None else None)
        self.agents = cfg.env.agents
        self.member_shaping = control.shaping.numpy() if control.shaping is not None else np.zeros((1, 0))

    def stopping(self) -> bool:
        return bool(self.control.stop[0])

    def take_free_slot(self) -> int:
        while True:
            try:
                return self.ch.free_slots.get(timeout=0.1)
            except queue.Empty:
                if self.stopping():
                    raise SystemExit(0) from None

    def start(self) -> None:
        for g, ids in enumerate(self.groups):
            for e in ids:
                self.env_h[e] = 0.0
                self.env_policy[e] = self.assign.first(e)
                self.begin_slot(e, self.own_slot(e) if self.park else self.take_free_slot(),
                                self.envs[e - self.w * self.k].reset())
            self.ch.requests.put((self.w, g))

    def own_slot(self, e: int) -> int:
        """In rounds: the slot of env e's next round."""
        return int(self.rounds[e - self.w * self.k] % self.own_slots) * self.num_envs + e

    def write_obs(self, slot: int, t: int, obs) -> None:
        if self.has_meas:
            self.obs[slot, t], self.meas[slot, t] = obs
        else:
            self.obs[slot, t] = obs

    def step_group(self, g: int) -> None:
        """Apply the policy's actions to group g's envs and record the results."""
        finished, starting = [], []
        # DD-PPO's preemption (sync mode, several nodes): the other ranks have this round, so end it
        # as soon as every rollout has min_steps (the envs of a group are always at the same step)
        first = self.groups[g][0]
        cut = self.park and int(self.cut_round[0]) == int(self.rounds[first - self.w * self.k]) - 1
        if self.lockstep:
            self.submit_group(g)
        played = self.env_policy.copy() if self.assign.mixed else None  # who plays whom (self-play)
        for e in self.groups[g]:
            i = e - self.w * self.k
            slot, t = int(self.env_slot[e]), int(self.env_t[e])
            action = self.actions[slot, t]
            self.clock(ENV_STEP)
            obs, reward, done, info = self.envs[i].step(self.env_action(action))
            self.clock(BOOKKEEPING)
            self.rewards[slot, t] = self.train_reward(e, reward, info) * self.scale
            self.dones[slot, t] = done
            self.timeouts[slot, t] = done and info.get("truncated", False)
            self.ep_return[i] += reward
            self.ep_len[i] += 1
            switch = False
            if done:
                self.env_h[e] = 0.0
                if info.get("episode_end", True):
                    obs = self.end_episode(i, info, played)
                    switch = self.next_member(e)
            t += 1
            # a population: an env whose member changed ends its slot here (the slot is one member's)
            if t == self.T or (cut and t >= self.min_steps) or switch:
                self.write_obs(slot, t, obs)  # bootstrap observation of the finished slot
                self.slot_len[slot] = t
                finished.append(slot)
                starting.append((e, obs))
                continue
            self.write_obs(slot, t, obs)
            self.env_t[e] = t
        if finished:
            self.hand_in(finished)
        self.steps[self.w] += len(self.groups[g])
        if starting and self.park:
            # in rounds (sync, deterministic): an env's next slot is freed by the learner (sync:
            # after its update; deterministic: once every env has finished this round); the
            # group waits for it here while this worker steps its other group
            self.parked.append((g, starting))
            return
        for e, obs in starting:
            self.begin_slot(e, self.take_free_slot(), obs)
        self.ch.requests.put((self.w, g))

    def train_reward(self, e: int, reward: float, info: dict) -> float:
        """The step's training reward: the env's (game reward + its shaping), or in a population
        with shaping the game reward + the changes of the env's terms weighed by env e's member."""
        terms = info.get("terms")
        if terms is None or not self.member_shaping.shape[1]:
            return info.get("train_reward", reward)
        return reward + float(np.dot(self.member_shaping[self.env_policy[e]], terms))

    def next_member(self, e: int) -> bool:
        """Env e's episode ended: draw the member of its next one; whether it changed."""
        if not self.assign.mixed:
            return False
        now = self.assign.next(e, int(self.env_policy[e]))
        changed = now != self.env_policy[e]
        self.env_policy[e] = now
        return changed

    def hand_in(self, slots: list[int]) -> None:
        """Finished slots to their member's learner (its batcher's queue); a self-play snapshot's
        straight back to the free list (nobody learns from them)."""
        if not self.assign.mixed:
            self.ch.trajectories[0].put_many(slots)
            return
        for p in sorted({int(self.slot_policy[s]) for s in slots}):
            mine = [s for s in slots if self.slot_policy[s] == p]
            (self.ch.trajectories[p] if p < self.assign.size else self.ch.free_slots).put_many(mine)

    def opponents(self, i: int, played) -> list[int]:
        """The members in env i's match's other seats (a match between agents fills `agents`
        consecutive envs), as they were at the step that ended it."""
        if played is None or self.agents == 1:
            return []
        first = self.w * self.k + i - i % self.agents
        return [int(played[first + j]) for j in range(self.agents) if first + j != self.w * self.k + i]

    def end_episode(self, i: int, info: dict, played=None):
        """Env i's episode is over: report it (not a match between agents that was restarted:
        report the restart instead) and return the next episode's first observation. The report
        names the member that played it and, in a match between agents, its opponents'."""
        if info.get("restart"):
            self.ch.reports.put(("restart", f"rollout{self.w}", info["restart"]))
        if not info.get("aborted"):
            e = self.w * self.k + i
            member = int(played[e]) if played is not None else 0
            objective = float(info.get("true_objective", self.ep_return[i]))  # the game reward by default
            self.ch.reports.put(("episode", float(self.ep_return[i]), int(self.ep_len[i]) * self.frameskip, objective,
                                 info.get("match"), member, self.opponents(i, played)))
        self.ep_return[i], self.ep_len[i] = 0.0, 0
        self.clock(ENV_STEP)
        obs = self.envs[i].reset()
        self.clock(BOOKKEEPING)
        return obs

    def submit_group(self, g: int) -> None:
        """Agents of matches between agents: every action of a match first (the last one steps
        the match in lock-step); step() then hands each agent its result."""
        self.clock(ENV_STEP)
        for e in self.groups[g]:
            action = self.actions[int(self.env_slot[e]), int(self.env_t[e])]
            self.envs[e - self.w * self.k].submit(self.env_action(action))
        self.clock(BOOKKEEPING)

    def begin_slot(self, e: int, slot: int, obs) -> None:
        """Env e (its index in the rank) starts a rollout in `slot` from observation `obs`."""
        i = e - self.w * self.k
        self.env_slot[e], self.env_t[e] = slot, 0
        self.slot_env[slot], self.slot_round[slot] = e, self.rounds[i]
        self.slot_policy[slot] = self.env_policy[e]
        if self.uniforms.shape[-1]:  # deterministic: this rollout's action draws, from the env's own stream
            key = seeds.derive(self.cfg.seed, seeds.ACTIONS, self.rank, e,
                               self.control.start_version + int(self.rounds[i]))
            self.uniforms[slot] = np.random.default_rng(key).random(self.uniforms.shape[1:], dtype=np.float32)
        self.rounds[i] += 1
        self.write_obs(slot, 0, obs)  # the finished slot's bootstrap observation starts the next one

    def unpark(self) -> None:
        """Start the parked groups whose next slots the learner has given back (the envs of a
        group are always at the same round); each asks for actions again."""
        released = int(self.released[0])
        for entry in list(self.parked):
            g, starting = entry
            if self.rounds[starting[0][0] - self.w * self.k] >= released + self.own_slots:
                continue
            for e, obs in starting:
                self.begin_slot(e, self.own_slot(e), obs)
            self.parked.remove(entry)
            self.ch.requests.put((self.w, g))


def run_rollout_worker(cfg, rank: int, worker: int, buffers, channels, control, random_actions: bool = False) -> None:
    envs = []
    with env_workdir(cfg.env, cfg.run_dir, f"rollout{worker}"):
        try:
            k = cfg.sampler.envs_per_worker
            groups = [[e - worker * k for e in group] for group in env_groups(cfg.sampler)[worker]]
            envs += make_envs(cfg.env, k, lambda i: seeds.derive(cfg.seed, seeds.ENV, rank, worker * k + i,
                                                                 control.start_version), groups)
            channels.reports.put(("ready", f"rollout{worker}"))
            if random_actions:
                _simulate(cfg, seeds.derive(cfg.seed, seeds.SIMULATE, rank, worker), worker, envs, buffers, control)
            else:
                _sample(cfg, rank, worker, envs, buffers, channels, control)
        finally:
            for env in envs:
                env.close()


def _sample(cfg, rank: int, worker: int, envs, buffers, channels, control) -> None:
    """Double-buffered sampling: step whichever group's actions have arrived."""
    clock = Clock(control.profile.numpy()[rollout_row(cfg.sampler.num_policy_workers, worker)])
    stepper = GroupStepper(cfg, worker, buffers, channels, envs, control, rank, clock)
    stepper.start()
    while not stepper.stopping():
        if stepper.parked:
            clock(BOOKKEEPING)
            stepper.unpark()
            if len(stepper.parked) == len(stepper.groups):  # nothing to step: poll for the release
                clock(WAIT)
                time.sleep(0.0005)
                continue
        clock(WAIT)
        try:
            groups = channels.actions[worker].get_many(timeout=0.002 if stepper.parked else 0.1)
        except queue.Empty:
            continue
        clock(BOOKKEEPING)
        for g in groups:
            stepper.step_group(g)


def _simulate(cfg, seed: int, worker: int, envs, buffers, control) -> None:
    """Pure simulation for the benchmark: random actions, same envs and obs writes, no policy."""
    spec = env_spec(cfg.env)
    rng = np.random.default_rng(seed)
    obs_buf, meas_buf = buffers.obs.numpy(), buffers.meas.numpy()
    steps = control.worker_steps.numpy()
    slots = [(worker * len(envs) + i) % buffers.num_slots for i in range(len(envs))]

    def write(slot, obs):
        if spec.meas_size:
            obs_buf[slot, 0], meas_buf[slot, 0] = obs
        else:
            obs_buf[slot, 0] = obs

    for env, slot in zip(envs, slots):
        write(slot, env.reset())
    env_action = action_converter(spec)
    clock = Clock(control.profile.numpy()[rollout_row(cfg.sampler.num_policy_workers, worker)])
    while not control.stop[0]:
        actions = [env_action(row) for row in random_rows(spec, rng, len(envs))]
        if hasattr(envs[0], "submit"):  # agents of matches: every action of a match first
            clock(ENV_STEP)
            for env, a in zip(envs, actions):
                env.submit(a)
        for env, slot, a in zip(envs, slots, actions):
            clock(ENV_STEP)
            obs, _, done, info = env.step(a)
            if done and info.get("episode_end", True):
                obs = env.reset()
            clock(BOOKKEEPING)
            write(slot, obs)
        steps[worker] += len(envs)


def random_rows(spec, rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniformly random actions as buffer rows: each discrete head's action uniform over its
    range, each continuous dim uniform between its bounds."""
    sizes = np.array(spec.action_heads)
    rows = (rng.random((n, len(sizes))) * sizes).astype(np.int64)
    if not spec.continuous:
        return rows
    dims = rng.uniform(spec.action_low, spec.action_high, (n, spec.continuous)).astype(np.float32)
    return np.concatenate([rows.astype(np.float32), dims], 1)
