"""Double-buffer alternation and trajectory-slot bookkeeping of a rollout worker, in-process.

Real shared buffers and the real GroupStepper; the env is a counter (its observation is the
number of steps it has taken) so every index can be checked exactly.
"""
import queue
from types import SimpleNamespace

import numpy as np
from helpers import compose

from nodes.envs import EnvSpec
from nodes.sampling.buffers import Control, allocate, env_groups
from nodes.sampling.rollout_worker import GroupStepper


class CountingEnv:
    spec = EnvSpec((3,), np.float32, (2,))  # one discrete head: step() takes an int
    time_limit = False  # True: its episodes end by a time limit (info "truncated")

    def __init__(self, episode_len):
        self.n, self.t, self.episode_len = 0, 0, episode_len
        self.actions = []

    def reset(self):
        self.t = 0
        return np.full(3, self.n, np.float32)

    def step(self, action):
        self.actions.append(int(action))
        self.n += 1
        self.t += 1
        done = self.t >= self.episode_len
        info = {"truncated": True} if done and self.time_limit else {}
        return (None if done else np.full(3, self.n, np.float32)), 1.0, done, info


class ListQueue:
    def __init__(self):
        self.items = []

    def put(self, x, timeout=None):
        self.items.append(x)

    def put_many(self, xs, timeout=None):
        self.items.extend(xs)

    def get(self, timeout=None):
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)

    def get_many(self, max_messages_to_get=1 << 30, timeout=None, **_):
        if not self.items:
            raise queue.Empty
        got, self.items = self.items[:max_messages_to_get], self.items[max_messages_to_get:]
        return got


def make(double_buffered=True, k=4, rollout=3, episode_len=100, hidden=2, mode="async"):
    # num_slots: enough that no test waits for the learner to return slots (sync mode: one per env)
    cfg = compose("env=gym", "sampler.num_workers=1", f"sampler.envs_per_worker={k}",
                  f"sampler.double_buffered={double_buffered}", f"sampler.rollout={rollout}",
                  f"sampler.batch_size={rollout}", "env.reward_scale=0.5", f"sampler.num_slots={4 * k}",
                  f"sampler.mode={mode}")
    buffers = allocate(CountingEnv.spec, cfg.sampler, hidden)
    ch = SimpleNamespace(requests=ListQueue(), trajectories=[ListQueue()], free_slots=ListQueue(), reports=ListQueue())
    ch.free_slots.items = list(range(buffers.num_slots))
    envs = [CountingEnv(episode_len) for _ in range(k)]
    stepper = GroupStepper(cfg, 0, buffers, ch, envs, Control.create(1))
    return stepper, buffers, ch, envs


def test_env_groups_split_in_two_or_one():
    cfg = compose("sampler.num_workers=2", "sampler.envs_per_worker=4")
    assert env_groups(cfg.sampler) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    cfg.sampler.double_buffered = False
    assert env_groups(cfg.sampler) == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]


def test_double_buffering_steps_only_the_group_whose_actions_arrived():
    stepper, buffers, ch, envs = make()
    stepper.start()
    assert ch.requests.items == [(0, 0), (0, 1)]  # both groups wait for inference at once
    ch.requests.items.clear()
    stepper.step_group(1)
    assert [len(e.actions) for e in envs] == [0, 0, 1, 1]
    assert ch.requests.items == [(0, 1)]  # group 1 asks again while group 0 is still pending
    stepper.step_group(0)
    stepper.step_group(1)
    assert [len(e.actions) for e in envs] == [1, 1, 2, 2]
    assert ch.requests.items == [(0, 1), (0, 0), (0, 1)]


def test_single_buffer_steps_all_envs_together():
    stepper, buffers, ch, envs = make(double_buffered=False)
    stepper.start()
    assert ch.requests.items == [(0, 0)]
    stepper.step_group(0)
    assert [len(e.actions) for e in envs] == [1, 1, 1, 1]


def test_slot_fills_then_moves_to_a_fresh_slot():
    stepper, buffers, ch, envs = make(rollout=3)
    stepper.start()
    first = [int(buffers.env_slot[e]) for e in range(4)]
    assert len(set(first)) == 4
    for t in range(3):
        for e in range(4):
            buffers.actions[first[e], t] = (e + t) % 2  # what a policy worker would write
        stepper.step_group(0)
        stepper.step_group(1)
    # every env finished its slot after T=3 steps and moved on to a new one at step 0
    assert sorted(ch.trajectories[0].items) == sorted(first)
    now = [int(buffers.env_slot[e]) for e in range(4)]
    assert not set(now) & set(first) and buffers.env_t.tolist() == [0, 0, 0, 0]
    for e in range(4):
        s = first[e]
        # observations 0..3 of the slot are the env's counter; the bootstrap obs is the new slot's first
        assert buffers.obs[s, :, 0].tolist() == [0, 1, 2, 3]
        assert buffers.obs[now[e], 0, 0].item() == 3
        assert buffers.rewards[s].tolist() == [0.5, 0.5, 0.5]  # scaled by env.reward_scale
        assert envs[e].actions == [(e + t) % 2 for t in range(3)]


def test_episode_end_marks_done_zeroes_hidden_state_and_reports_unscaled_reward():
    stepper, buffers, ch, envs = make(rollout=4, episode_len=2)
    stepper.start()
    buffers.env_h.fill_(7.0)  # as if a policy worker had written hidden states
    stepper.step_group(0)
    assert buffers.env_h[0].tolist() == [7.0, 7.0]
    stepper.step_group(0)  # second step ends the episode of envs 0 and 1
    s = int(buffers.env_slot[0])
    assert buffers.dones[s].tolist() == [False, True, False, False]
    assert buffers.env_h[0].tolist() == [0.0, 0.0] and buffers.env_h[2].tolist() == [7.0, 7.0]
    # reward, length in env frames, true objective (the game reward when the env reports none),
    # no match result, member 0 (no population), no opponents
    assert ch.reports.items == [("episode", 2.0, 2, 2.0, None, 0, []), ("episode", 2.0, 2, 2.0, None, 0, [])]
    # the observation after the done is the reset observation of the new episode
    assert buffers.obs[s, 2, 0].item() == envs[0].n


def test_an_episode_cut_by_a_time_limit_is_marked_in_timeouts():
    stepper, buffers, ch, envs = make(rollout=4, episode_len=2)
    envs[0].time_limit = True  # env 0's episodes hit a time limit, env 1's terminate
    stepper.start()
    stepper.step_group(0)
    stepper.step_group(0)
    s0, s1 = int(buffers.env_slot[0]), int(buffers.env_slot[1])
    assert buffers.dones[s0].tolist() == buffers.dones[s1].tolist() == [False, True, False, False]
    assert buffers.timeouts[s0].tolist() == [False, True, False, False]
    assert buffers.timeouts[s1].tolist() == [False, False, False, False]


def test_in_rounds_a_finished_group_parks_until_the_learner_releases_its_round():
    """sampler.mode=sync: one slot per env (deterministic: two), slot e for env e. A group whose
    rollout is done hands its slots over and waits (no action request) while the worker's other
    group keeps stepping; once the learner has released a round (Control.rounds_released) it
    starts its next rollout in its own slot from the bootstrap observation and asks again."""
    stepper, buffers, ch, envs = make(mode="sync", rollout=2)
    assert buffers.num_slots == 4
    stepper.start()
    assert [int(buffers.env_slot[e]) for e in range(4)] == [0, 1, 2, 3]
    assert ch.requests.items == [(0, 0), (0, 1)]
    ch.requests.items.clear()
    stepper.step_group(0)
    stepper.step_group(0)  # group 0's rollout of 2 steps is done
    # the first step asked; the last did not
    assert ch.trajectories[0].items == [0, 1] and ch.requests.items == [(0, 0)]
    assert buffers.slot_env[:2].tolist() == [0, 1] and buffers.slot_round[:2].tolist() == [0, 0]
    ch.requests.items.clear()
    stepper.step_group(1)  # the other group is not held up
    assert ch.requests.items == [(0, 1)]
    stepper.unpark()
    assert stepper.parked and ch.requests.items == [(0, 1)]  # round 0 not released yet: still parked
    stepper.control.rounds_released[0] = 1
    stepper.unpark()
    assert not stepper.parked and ch.requests.items == [(0, 1), (0, 0)]
    assert buffers.slot_round[:2].tolist() == [1, 1]  # the same slots, now round 1
    for e, old in ((0, 0), (1, 1)):
        slot = int(buffers.env_slot[e])
        assert int(buffers.env_t[e]) == 0
        assert np.array_equal(buffers.obs[slot, 0].numpy(), buffers.obs[old, 2].numpy())  # the bootstrap obs
