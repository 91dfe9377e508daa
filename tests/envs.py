"""Tiny gymnasium envs for tests, made by `gym.make("tests.envs:<Id>")` in any process."""
import os
import time

import gymnasium as gym
import numpy as np


class SignBandit(gym.Env):
    """Reward 1 when the action equals the sign of obs[0] (1 if positive, else 0); 8-step episodes.

    Learnable only if observations, actions and rewards line up step by step through the whole
    sampler: a perfect policy scores 8 per episode, a random one 4.
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        reward = float(int(action) == int(self.obs[0] > 0))
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs, reward, self.t >= 8, False, {}


gym.register("SignBandit-v0", entry_point=SignBandit)


class CrashAfter(SignBandit):
    """SignBandit that raises inside a rollout worker after 300 steps (crash handling tests)."""

    steps = 0

    def step(self, action):
        CrashAfter.steps += 1
        if CrashAfter.steps > 300:
            raise RuntimeError("env exploded on purpose")
        return super().step(action)


gym.register("CrashAfter-v0", entry_point=CrashAfter)


class SlowBandit(SignBandit):
    """SignBandit whose steps take 2 ms longer: a run that is still training when a test
    signals it (the Slurm preemption test), one whose speed no machine raises (the chaos and
    elastic join tests)."""

    delay_s = 0.002

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


gym.register("SlowBandit-v0", entry_point=SlowBandit)


class SlowOnRank1Bandit(SignBandit):
    """SignBandit whose steps take 0.2 ms longer on rank 1 only (RANK, as launch.spawn.local sets it):
    rank 1 is a straggler at about half the speed of rank 0 (the straggler test)."""

    delay_s = 0.0002

    def step(self, action):
        if os.environ.get("RANK") == "1":
            time.sleep(self.delay_s)
        return super().step(action)


gym.register("SlowOnRank1Bandit-v0", entry_point=SlowOnRank1Bandit)


class BoxRecorder(gym.Env):
    """Two continuous action dims in [-1, 1] x [0, 2]; keeps the last action it was given (the
    wrapper's clipping is visible there). Reward -|a - obs[:2]|, 8-step episodes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.last_action = 0, None
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        self.last_action = np.array(action)
        reward = -float(np.abs(self.last_action - self.obs[:2]).sum())
        self.t += 1
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs, reward, self.t >= 8, False, {}


gym.register("BoxRecorder-v0", entry_point=BoxRecorder)


def _with_actions(name, space):
    """SignBandit with another action space: env=gym refuses these in one line."""
    cls = type(name, (SignBandit,), {"action_space": space})
    gym.register(f"{name}-v0", entry_point=cls)


_with_actions("DictActions", gym.spaces.Dict({"move": gym.spaces.Discrete(3), "turn": gym.spaces.Discrete(2)}))
_with_actions("MultiBinaryActions", gym.spaces.MultiBinary(3))
_with_actions("SquareBoxActions", gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32))
_with_actions("UnboundedBoxActions", gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
