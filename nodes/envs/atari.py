"""Atari 2600 games through ale-py (gymnasium ids such as ALE/Breakout-v5), DQN preprocessing.

The gymnasium env is created with frameskip=1, no sticky actions and the minimal action set,
then driven through its ALEInterface directly (no per-frame observation copies):
  - reset: the game restarts and plays 1..env.noop_max random no-op frames (random start states)
  - step: the action is repeated env.frameskip frames, the observation is the max over the last
    two (flicker removal), converted to grayscale by the ALE and area-resized (as OpenCV's
    INTER_AREA) to env.height x env.width (84x84) with precomputed gathers (numpy, no BLAS, no cv2)
  - the last env.frame_stack frames are stacked: obs is (frame_stack, height, width) uint8
  - env.episodic_life: a lost life returns done=True with info["episode_end"]=False (the game
    goes on, the score keeps adding up, the frame stack restarts from the current frame)
  - env.clip_rewards: info["train_reward"] = sign(reward); `reward` stays the game score
  - env.fire_reset: FIRE for one agent step (env.frameskip frames, not counted as env frames) after
    a game reset and after a lost life, in games whose minimal action set has FIRE
Info dicts are shared constants, and the screen, resize and stack buffers are allocated once:
the only per-step allocation is the returned observation (a copy the caller may keep).
"""
from __future__ import annotations

import functools

import numpy as np

from nodes.envs import NO_INFO, EnvSpec
from nodes.errors import ConfigError, did_you_mean, one_line

# shared, never mutated: one of these (or NO_INFO) is every step's info
_CLIP = {1.0: {"train_reward": 1.0}, -1.0: {"train_reward": -1.0}, 0.0: NO_INFO}
_LIFE = {1.0: {"train_reward": 1.0, "episode_end": False}, -1.0: {"train_reward": -1.0, "episode_end": False},
         0.0: {"episode_end": False}}


def _gym():
    try:
        import ale_py
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ConfigError(f"Atari needs ale-py: pip install ale-py ({exc})") from None
    import gymnasium as gym
    gym.register_envs(ale_py)
    return gym


def _make_gym(env_id: str):
    gym = _gym()
    return gym.make(env_id, obs_type="grayscale", frameskip=1, repeat_action_probability=0.0,
                    full_action_space=False)


@functools.cache
def _screen_and_actions(env_id: str):
    """(screen height, screen width, number of actions): loads the ROM, steps nothing."""
    env = _make_gym(env_id)
    try:
        ale = env.unwrapped.ale
        h, w = ale.getScreenDims()
        return int(h), int(w), len(ale.getMinimalActionSet())
    finally:
        env.close()


def check(env_cfg) -> None:
    if not env_cfg.id:
        raise ConfigError("env=atari needs env.id, e.g. env.id=ALE/Breakout-v5")
    gym = _gym()
    entry = gym.registry.get(env_cfg.id)
    if entry is None or not str(entry.entry_point).startswith("ale_py"):
        ids = [k for k, e in gym.registry.items() if str(e.entry_point).startswith("ale_py")]
        raise ConfigError(f"unknown Atari env id '{env_cfg.id}'{did_you_mean(env_cfg.id, ids)} (an ale-py id such as "
                          "ALE/Breakout-v5)")
    if not env_cfg.grayscale:
        raise ConfigError("Atari envs support env.grayscale=true only")
    try:
        h, w, _ = _screen_and_actions(env_cfg.id)
    except Exception as exc:  # noqa: BLE001 - a missing ROM or a bad id raises several types
        raise ConfigError(f"cannot start Atari env '{env_cfg.id}': {one_line(exc)}") from None
    if not (16 <= env_cfg.height <= h and 16 <= env_cfg.width <= w):
        raise ConfigError(f"env.width x env.height must be between 16x16 and {w}x{h}, "
                          f"got {env_cfg.width}x{env_cfg.height}")


def spec(env_cfg) -> EnvSpec:
    _, _, n = _screen_and_actions(env_cfg.id)
    return EnvSpec((env_cfg.frame_stack, env_cfg.height, env_cfg.width), np.uint8, (n,))


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix: output i is the mean of the input interval [i, i+1) * n_in / n_out."""
    edges = np.arange(n_out + 1) * (n_in / n_out)
    lo, hi = edges[:-1, None], edges[1:, None]
    j = np.arange(n_in)[None, :]
    overlap = np.clip(np.minimum(hi, j + 1) - np.maximum(lo, j), 0.0, None)
    return (overlap / overlap.sum(axis=1, keepdims=True)).astype(np.float32)


def _taps(n_in: int, n_out: int):
    """Area weights as gathers: (indices (m * n_out,), weights (m * n_out, 1)), tap-major, m taps."""
    w = _area_weights(n_in, n_out)
    m = int((w > 0).sum(axis=1).max())
    idx, wt = np.zeros((m, n_out), np.intp), np.zeros((m, n_out), np.float32)
    for i in range(n_out):
        nz = np.flatnonzero(w[i])
        idx[:, i] = nz[0]  # unused taps: any index, weight 0
        idx[:len(nz), i], wt[:len(nz), i] = nz, w[i, nz]
    return idx.reshape(-1), wt.reshape(-1, 1)


class AtariEnv:
    def __init__(self, env_cfg, seed: int):
        from ale_py import Action
        self.spec = spec(env_cfg)
        self.env = _make_gym(env_cfg.id)
        self.env.reset(seed=seed % (2**31))  # seeds the ALE and loads the ROM
        self.ale = self.env.unwrapped.ale
        self.actions = list(self.ale.getMinimalActionSet())
        self.noop = Action.NOOP
        self.fire = Action.FIRE if env_cfg.fire_reset and Action.FIRE in self.actions else None
        self.rng = np.random.default_rng(seed)
        self.frameskip = env_cfg.frameskip
        self.noop_max = env_cfg.noop_max
        self.episodic_life = env_cfg.episodic_life
        self.clip = env_cfg.clip_rewards
        h, w = self.ale.getScreenDims()
        self.k, oh, ow = self.spec.obs_shape
        self._screens = np.zeros((2, h, w), np.uint8)  # the last two frames of a step
        # area resize as a few gathers: rows first, then (transposed, so the gathers copy whole
        # rows) columns; every buffer is allocated here, once
        self._ri, self._rw = _taps(h, oh)
        self._ci, self._cw = _taps(w, ow)
        self._f = np.empty((h, w), np.float32)
        self._g = np.empty((len(self._ri), w), np.float32)
        self._rows = np.empty((oh, w), np.float32)
        self._rows_t = np.empty((w, oh), np.float32)
        self._h = np.empty((len(self._ci), oh), np.float32)
        self._small_t = np.empty((ow, oh), np.float32)
        # frame i goes to _ring[p] and _ring[p + k]: _ring[p + 1 : p + 1 + k] is the stack, oldest first
        self._ring = np.zeros((2 * self.k, oh, ow), np.uint8)
        self._p = 0
        self.lives = 0

    def _resize(self, frame: np.ndarray, out: np.ndarray) -> None:
        oh, ow = out.shape
        np.copyto(self._f, frame)
        np.take(self._f, self._ri, axis=0, out=self._g)
        self._g *= self._rw
        np.sum(self._g.reshape(-1, oh, self._f.shape[1]), axis=0, out=self._rows)
        np.copyto(self._rows_t, self._rows.T)
        np.take(self._rows_t, self._ci, axis=0, out=self._h)
        self._h *= self._cw
        np.sum(self._h.reshape(-1, ow, oh), axis=0, out=self._small_t)
        np.add(self._small_t.T, 0.5, out=out, casting="unsafe")  # round, not truncate

    def _push(self, frame: np.ndarray, refill: bool = False) -> np.ndarray:
        k = self.k
        if refill:
            self._p = p = k - 1
            self._resize(frame, self._ring[0])
            self._ring[1:] = self._ring[0]
        else:
            self._p = p = (self._p + 1) % k
            self._resize(frame, self._ring[p])
            self._ring[p + k] = self._ring[p]
        return self._ring[p + 1:p + 1 + k].copy()

    def reset(self) -> np.ndarray:
        ale = self.ale
        ale.reset_game()
        if self.noop_max:
            for _ in range(int(self.rng.integers(1, self.noop_max + 1))):
                ale.act(self.noop)
                if ale.game_over():
                    ale.reset_game()
        if self.fire is not None:
            self._repeat(self.fire)
            if ale.game_over():  # a game lost while serving: start again, without the FIRE
                ale.reset_game()
        self.lives = ale.lives()
        ale.getScreenGrayscale(self._screens[1])
        return self._push(self._screens[1], refill=True)

    def _repeat(self, a) -> float:
        """Action `a` for env.frameskip frames, or until the game is over; the last two frames in
        self._screens (a skip of 1: the one frame in self._screens[1]); the reward."""
        ale, skip, screens = self.ale, self.frameskip, self._screens
        reward = 0.0
        for i in range(skip):
            reward += ale.act(a)
            if ale.game_over():  # truncation (108k frames for v5 ids) included
                return reward
            if i >= skip - 2:
                ale.getScreenGrayscale(screens[i - skip + 2])
        return reward

    def _frame(self) -> np.ndarray:
        """The step's observation frame: the max of the last two (flicker removal)."""
        screens = self._screens
        if self.frameskip >= 2:
            np.maximum(screens[0], screens[1], out=screens[0])
            return screens[0]
        return screens[1]

    def step(self, action):
        ale = self.ale
        reward = self._repeat(self.actions[int(action)])
        if ale.game_over():
            return None, reward, True, (_CLIP[float(np.sign(reward))] if self.clip else NO_INFO)
        lives = ale.lives()
        if self.fire is not None and lives < self.lives:  # serve again: the FIRE step's frames are the observation
            reward += self._repeat(self.fire)
            if ale.game_over():
                return None, reward, True, (_CLIP[float(np.sign(reward))] if self.clip else NO_INFO)
        frame = self._frame()
        life_lost = self.episodic_life and lives < self.lives
        self.lives = lives
        sign = float(np.sign(reward)) if self.clip and reward else 0.0
        if life_lost:
            return self._push(frame, refill=True), reward, True, _LIFE[sign]
        return self._push(frame), reward, False, _CLIP[sign]

    def render(self) -> np.ndarray:
        return self.ale.getScreenRGB()

    def close(self) -> None:
        self.env.close()


def make(env_cfg, seed: int) -> AtariEnv:
    return AtariEnv(env_cfg, seed)
