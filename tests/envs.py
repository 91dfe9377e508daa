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

    def __init__(self, delay_s: float = 0.002):  # env.kwargs.delay_s: slower still
        self.delay_s = delay_s

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


class TupleBoxRecorder(BoxRecorder):
    """A Tuple action (Discrete(2), Box(0, 10, (1,))), whose last one it keeps as given."""

    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0.0, 10.0, (1,), np.float32)))

    def step(self, action):
        self.last_action = action
        self.t += 1
        return self.obs, 0.0, self.t >= 8, False, {}


gym.register("TupleBoxRecorder-v0", entry_point=TupleBoxRecorder)


def _with_actions(name, space):
    """SignBandit with another action space: env=gym refuses these in one line."""
    cls = type(name, (SignBandit,), {"action_space": space})
    gym.register(f"{name}-v0", entry_point=cls)


_with_actions("DictActions", gym.spaces.Dict({"move": gym.spaces.Discrete(3), "turn": gym.spaces.Discrete(2)}))
_with_actions("MultiBinaryActions", gym.spaces.MultiBinary(3))
_with_actions("SquareBoxActions", gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32))
_with_actions("UnboundedBoxActions", gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))


class DictBandit(gym.Env):
    """A Dict observation (an HxWxC image, a categorical, a vector, and a text no encoder takes) and
    three binary action heads (MultiDiscrete): head i is paid 1/3 when it matches key i's bit: the
    image bright, the direction, vec[0] > 0. 8-step episodes: a policy that reads every key scores
    8, one blind to any key at most 6.7, a random one 4. check=True: step() asserts the action it
    gets is the MultiDiscrete's own (an int64 array of 3)."""

    observation_space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "direction": gym.spaces.Discrete(2),
        "vec": gym.spaces.Box(-1.0, 1.0, (3,), np.float32), "mission": gym.spaces.Text(16)})
    action_space = gym.spaces.MultiDiscrete([2, 2, 2])

    def _observe(self):
        self.bits = self.np_random.integers(0, 2, 3)
        vec = self.np_random.uniform(0.1, 1.0, 3).astype(np.float32) * (1 if self.bits[2] else -1)
        image = np.full((36, 36, 3), 200 if self.bits[0] else 30, np.uint8)
        return {"image": image, "direction": int(self.bits[1]), "vec": vec, "mission": "getthebits"}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        assert isinstance(action, np.ndarray) and action.shape == (3,), action
        reward = float((np.asarray(action) == self.bits).sum()) / 3
        self.t += 1
        return self._observe(), reward, self.t >= 8, False, {}


gym.register("DictBandit-v0", entry_point=DictBandit)


class PixelTupleBandit(gym.Env):
    """An HxWxC uint8 image whose top and bottom halves are each bright or dark, and a Tuple action
    (Discrete(2, start=1), Box(-1, 1, (1,))): half a point when the discrete part says the top half
    (2: bright, 1: dark), half when the continuous part's sign says the bottom half (+: bright).
    8-step episodes: perfect 8, random 4, blind to either half or part at most 6. step() asserts
    the action is the Tuple's own: (an int from 1, a float32 array of 1)."""

    observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2, start=1), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)))

    def _observe(self):
        self.bits = self.np_random.integers(0, 2, 2)
        image = np.empty((36, 36, 3), np.uint8)
        image[:18], image[18:] = (200 if self.bits[0] else 30), (200 if self.bits[1] else 30)
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        choice, amount = action
        assert isinstance(choice, int) and choice in (1, 2) and amount.shape == (1,), action
        reward = 0.5 * float(choice == 1 + self.bits[0]) + 0.5 * float((amount[0] > 0) == bool(self.bits[1]))
        self.t += 1
        return self._observe(), reward, self.t >= 8, False, {}


gym.register("PixelTupleBandit-v0", entry_point=PixelTupleBandit)


class LyingObs(SignBandit):
    """Declares a (4,) float32 observation inside a Dict and returns (5,)."""

    observation_space = gym.spaces.Dict({"vec": gym.spaces.Box(-1.0, 1.0, (4,), np.float32)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"vec": np.zeros(5, np.float32)}, {}


gym.register("LyingObs-v0", entry_point=LyingObs)


def make_dict_bandit(raise_error: bool = False):
    """An env.make factory: DictBandit, or (raise_error) a factory that fails."""
    if raise_error:
        raise ValueError("no such level")
    return DictBandit()


class TinyImage(PixelTupleBandit):
    """A 7x7x3 image observation: too small for the conv stacks."""

    observation_space = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)

    def _observe(self):
        return np.zeros((7, 7, 3), np.uint8)


gym.register("TinyImage-v0", entry_point=TinyImage)


class ObjectiveBandit(SignBandit):
    """SignBandit that reports its own measure of the episode at the last step: info["true_objective"]."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, ({"true_objective": 42.0} if terminated else info)


gym.register("ObjectiveBandit-v0", entry_point=ObjectiveBandit)


class EpisodeLog(SignBandit):
    """SignBandit that appends its pid to the file `path` (its kwarg, as a user gives it: perhaps
    relative) at each episode's end, as crafter's recorder appends to its stats_dir/stats.jsonl."""

    def __init__(self, path: str):
        self.path = path

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()}\n")
        return obs, reward, terminated, truncated, info


gym.register("EpisodeLog-v0", entry_point=EpisodeLog)
