"""The EnvPool backend (env.backend=envpool): each env group of a rollout worker is one EnvPool batch.

EnvPool (Weng et al. 2022) steps a batch of envs in C++; a rollout worker's group (half its envs
when double-buffered) is one pool here, stepped with one call once the group's actions are in.
Each env of the group is still an env slot with the interface of nodes/envs/__init__.py, in the
lock-step form that matches between agents already use: submit(action) on every slot of the pool
first (the last one steps the pool), then step(action) on each hands out that env's result. So
the buffers, queues and everything downstream are the python backend's.

The synchronous step (`pool.step(actions, env_id)`) is used, not the asynchronous send/recv: a
rollout worker is pinned to one core, so the pool's thread shares that core with the worker and
has nothing to overlap with (benchmarks/envpool_api.py measures both on this machine).

What the pool does and what stays in Python:
  - Atari (env family atari, `ALE/<Game>-v5` -> EnvPool's `<Game>-v5`): the pool plays the frames
    (frameskip, max over the last two, grayscale, INTER_AREA resize to env.height x env.width,
    1..env.noop_max no-ops after a game reset, the v5 limit of 108,000 frames); the frame stack,
    a lost life (env.episodic_life) and reward clipping are done here as nodes/envs/atari.py does
    them, so observations are the python backend's up to the resize's rounding (at most one grey
    level on a few pixels: OpenCV's INTER_AREA against ours; tests/test_envpool.py compares).
    EnvPool's own episodic life is not used: it plays no-ops after a lost life and keeps the stack.
  - gym ids EnvPool has (MuJoCo v5 tasks, CartPole, Pendulum, ...), env.frameskip 1: observations
    as float32, Box actions clipped to the bounds here, `truncated` reported as the python
    backend does. EnvPool's MuJoCo is its own build of the engine: the same task, not the same
    floating point trajectory as gymnasium's.
  - A finished episode is reset explicitly (`pool.reset(env_id)`) when the rollout worker asks,
    not by EnvPool's auto-reset on the next step (which would spend that step's action).
Evaluation and enjoy step the python backend (one env at a time).
"""
from __future__ import annotations

import numpy as np

from nodes.envs import NO_INFO
from nodes.errors import ConfigError

FAMILIES = ("atari", "gym")
ATARI_FRAMES_PER_EPISODE = 108_000  # the v5 ids' limit (ale-py's max_num_frames_per_episode)


def _envpool():
    try:
        import envpool
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ConfigError(f"env.backend=envpool needs envpool: pip install -e '.[envpool]' in the clone "
                          f"({exc})") from None
    return envpool


def task_id(env_cfg) -> str:
    """EnvPool's name of the task: ALE/Pong-v5 -> Pong-v5; gymnasium ids are EnvPool's own."""
    return env_cfg.id.removeprefix("ALE/") if env_cfg.family == "atari" else env_cfg.id


def check(env_cfg) -> None:
    """One line for what this backend cannot run. Starts no env."""
    if env_cfg.family not in FAMILIES:
        raise ConfigError(f"env.backend=envpool runs env families {', '.join(FAMILIES)}, "
                          f"not '{env_cfg.family}' (env={env_cfg.name}): use env.backend=python")
    if env_cfg.make or env_cfg.kwargs:
        raise ConfigError("env.backend=envpool makes EnvPool's own tasks by env.id: env.make and env.kwargs "
                          "need env.backend=python")
    envpool = _envpool()
    if task_id(env_cfg) not in envpool.list_all_envs():
        raise ConfigError(f"EnvPool has no task '{task_id(env_cfg)}' (env.id={env_cfg.id}); "
                          "envpool.list_all_envs() lists them")
    if env_cfg.family == "atari" and env_cfg.noop_max < 1:
        raise ConfigError("env.backend=envpool plays 1..env.noop_max no-ops after every game reset: "
                          f"env.noop_max must be >= 1, got {env_cfg.noop_max}")
    if env_cfg.family == "atari" and env_cfg.fire_reset:
        raise ConfigError("env.fire_reset=true is done by the python backend only: use env.backend=python")
    if env_cfg.family == "gym" and env_cfg.frameskip != 1:
        raise ConfigError(f"env.backend=envpool steps gym tasks with env.frameskip=1, got {env_cfg.frameskip}")


def _make_pool(env_cfg, env_seeds: list[int]):
    envpool = _envpool()
    n = len(env_seeds)
    kwargs = dict(env_type="gymnasium", num_envs=n, batch_size=n, num_threads=1,
                  env_seed=[s % 2**31 for s in env_seeds])
    if env_cfg.family == "atari":
        kwargs.update(stack_num=1, frame_skip=env_cfg.frameskip, img_height=env_cfg.height,
                      img_width=env_cfg.width, gray_scale=True, noop_max=env_cfg.noop_max,
                      episodic_life=False, reward_clip=False, use_fire_reset=False,
                      repeat_action_probability=0.0,
                      max_episode_steps=ATARI_FRAMES_PER_EPISODE // env_cfg.frameskip)
    return envpool.make(task_id(env_cfg), **kwargs)


class Pool:
    """One EnvPool batch and the results of its last step, by env index in the pool."""

    def __init__(self, env_cfg, env_seeds: list[int], spec):
        self.pool = _make_pool(env_cfg, env_seeds)
        self.clip_actions = env_cfg.clip_actions  # gym tasks' Box actions (env.clip_actions)
        # env.rescale_actions: the spec's bounds are -1..1 (gym_env.spec wraps the python env in
        # RescaleAction); the pool's task wants its own: low + (a + 1) / 2 x (high - low)
        self.rescale = None
        if spec.continuous and env_cfg.rescale_actions:
            space = self.pool.action_space
            self.rescale = (np.asarray(space.low, np.float32), np.asarray(space.high - space.low, np.float32) / 2)
        self.n = num_envs = len(env_seeds)
        self.ids = np.arange(num_envs, dtype=np.int32)
        self.spec = spec
        self.actions = (np.zeros((num_envs, spec.continuous), np.float32) if spec.continuous
                        else np.zeros(num_envs, np.int32))
        self.submitted = 0
        self.obs = self.rewards = self.terminated = self.truncated = self.lives = None

    def submit(self, i: int, action) -> None:
        if self.rescale is not None:
            low, half = self.rescale
            action = low + (action + 1.0) * half
        self.actions[i] = action
        self.submitted += 1
        if self.submitted == self.n:
            self.submitted = 0
            obs, rewards, terminated, truncated, info = self.pool.step(self.actions, self.ids)
            order = np.argsort(info["env_id"])  # results come in the order the envs finished
            self.obs, self.rewards = obs[order], rewards[order]
            self.terminated, self.truncated = terminated[order], truncated[order]
            self.lives = info["lives"][order] if "lives" in info else None

    def reset(self, i: int):
        """Env i's next episode; (its first observation, its lives or None)."""
        obs, info = self.pool.reset(self.ids[i:i + 1])
        return obs[0], (int(info["lives"][0]) if "lives" in info else None)

    def close(self) -> None:
        """Every slot of the pool closes it; the first does."""
        pool, self.pool = self.pool, None
        if pool is not None and hasattr(pool, "close"):
            pool.close()


class GymSlot:
    """Env i of a pool of a gym task (vector observations)."""

    def __init__(self, pool: Pool, i: int):
        self.pool, self.i, self.spec = pool, i, pool.spec
        self.bounds = None
        if self.spec.continuous and pool.clip_actions:
            self.bounds = (np.array(self.spec.action_low, np.float32), np.array(self.spec.action_high, np.float32))

    def reset(self) -> np.ndarray:
        obs, _ = self.pool.reset(self.i)
        return obs.astype(np.float32)

    def submit(self, action) -> None:
        self.pool.submit(self.i, action if self.bounds is None else np.clip(action, *self.bounds))

    def step(self, action):
        p, i = self.pool, self.i
        terminated, truncated = bool(p.terminated[i]), bool(p.truncated[i])
        done = terminated or truncated
        obs = None if done else p.obs[i].astype(np.float32)
        info = {"truncated": True} if truncated and not terminated else NO_INFO
        return obs, float(p.rewards[i]), done, info

    def close(self) -> None:
        self.pool.close()


class AtariSlot:
    """Env i of a pool of an Atari game: EnvPool's frames, stacked here (nodes/envs/atari.py's rules)."""

    def __init__(self, pool: Pool, i: int, env_cfg):
        from nodes.envs.atari import _CLIP, _LIFE
        self.pool, self.i, self.spec = pool, i, pool.spec
        self.clip_info, self.life_info = _CLIP, _LIFE
        self.episodic_life, self.clip = env_cfg.episodic_life, env_cfg.clip_rewards
        self.k = self.spec.obs_shape[0]
        # frame j goes to _ring[p] and _ring[p + k]: _ring[p + 1 : p + 1 + k] is the stack, oldest first
        self._ring = np.zeros((2 * self.k, *self.spec.obs_shape[1:]), np.uint8)
        self._p = 0
        self.lives = 0

    def _push(self, frame: np.ndarray, refill: bool = False) -> np.ndarray:
        k = self.k
        if refill:
            self._p = p = k - 1
            self._ring[:] = frame
        else:
            self._p = p = (self._p + 1) % k
            self._ring[p] = self._ring[p + k] = frame
        return self._ring[p + 1:p + 1 + k].copy()

    def reset(self) -> np.ndarray:
        obs, self.lives = self.pool.reset(self.i)
        return self._push(obs[0], refill=True)

    def submit(self, action) -> None:
        self.pool.submit(self.i, int(action))

    def step(self, action):
        p, i = self.pool, self.i
        reward = float(p.rewards[i])
        sign = float(np.sign(reward)) if self.clip and reward else 0.0
        if p.terminated[i] or p.truncated[i]:  # game over, or the v5 frame limit
            return None, reward, True, self.clip_info[sign] if self.clip else NO_INFO
        lives = int(p.lives[i])
        life_lost = self.episodic_life and lives < self.lives
        self.lives = lives
        if life_lost:
            return self._push(p.obs[i, 0], refill=True), reward, True, self.life_info[sign]
        return self._push(p.obs[i, 0]), reward, False, self.clip_info[sign]

    def close(self) -> None:
        self.pool.close()


def make_slots(env_cfg, spec, groups: list[list[int]], seed_of) -> list:
    """The env slots of one rollout worker: groups lists its env indexes (0..k-1) by group, each
    group one pool; env e is seeded with seed_of(e) whatever its pool (EnvPool's env_seed), so a
    run's envs do not depend on how they are grouped."""
    slots: list = [None] * sum(len(g) for g in groups)
    pools: list[Pool] = []
    try:
        for group in groups:
            pools.append(Pool(env_cfg, [seed_of(e) for e in group], spec))
            for j, e in enumerate(group):
                slots[e] = AtariSlot(pools[-1], j, env_cfg) if env_cfg.family == "atari" else GymSlot(pools[-1], j)
    except BaseException:
        for pool in pools:
            pool.close()
        raise
    return slots
