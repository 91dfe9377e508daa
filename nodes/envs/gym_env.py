"""Any gymnasium env with a flat Box observation and a Discrete or a flat Box action space: the
fast test envs, classic control (CartPole, Pendulum) and the MuJoCo tasks (env=mujoco_*).

A Box action space is spec.continuous Gaussian dims (nodes.models.heads.ActionHeads). The policy
samples unbounded values; step() clips them to the Box's bounds before the env sees them
(env.clip_actions; env=mujoco* passes them on as drawn: MuJoCo clamps its controls itself), and
the learner's log-prob stays that of the unclipped sample, as in Sample Factory and CleanRL (a
squashed or clip-aware distribution would change the log-prob; this keeps it a plain Normal's).

Gymnasium's `truncated` (a time limit, e.g. a MuJoCo task's 1,000 steps) ends the trajectory as
a termination does, and says so in info ("truncated"): with algo.value_bootstrap the learner
adds the discounted value of the state it was cut at to the last reward, as Sample Factory's
value_bootstrap does (the task goes on past a time limit; a termination is the task's end).
"""
from __future__ import annotations

import importlib
import logging

import numpy as np

from nodes.envs import NO_INFO, EnvSpec
from nodes.errors import ConfigError, one_line

TRUNCATED = {"truncated": True}  # a time limit's info: shared, never mutated

# the extra that installs what an env's entry point needs, by the package the entry point is in
EXTRAS = {"gymnasium.envs.mujoco": "mujoco"}


def check(env_cfg) -> None:
    import gymnasium as gym
    if not env_cfg.id:
        example = "HalfCheetah-v5" if env_cfg.name == "mujoco" else "CartPole-v1"
        raise ConfigError(f"env={env_cfg.name} needs env.id, e.g. env.id={example}")
    module, _, name = env_cfg.id.rpartition(":")  # "pkg.module:EnvId" registers EnvId on import
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"cannot import '{module}' for env.id '{env_cfg.id}': {exc}") from None
    if name not in gym.registry:
        raise ConfigError(f"unknown gymnasium env id '{env_cfg.id}'")
    s = spec(env_cfg)
    if len(s.obs_shape) != 1:
        raise ConfigError(f"env=gym supports flat vector observations, '{env_cfg.id}' has shape {s.obs_shape}")


def _make(env_cfg):
    """gym.make, a missing package (MuJoCo's, Box2D's, ...) refused in one line naming the install."""
    import gymnasium as gym
    # gymnasium's own ids are registered at import ("module:Id" ones only once gym.make imports the module)
    entry = str(getattr(gym.registry.get(env_cfg.id.rpartition(":")[2]), "entry_point", ""))
    extra = next((x for pkg, x in EXTRAS.items() if entry.startswith(pkg)), None)
    try:
        if extra == "mujoco":
            _log_mujoco_warnings()
        env = gym.make(env_cfg.id)
    except (ImportError, gym.error.DependencyNotInstalled) as exc:
        hint = f"; pip install 'distrl[{extra}]'" if extra else ""
        raise ConfigError(f"env.id '{env_cfg.id}' needs a package that is not installed here "
                          f"({one_line(exc)}){hint}") from None
    if env_cfg.rescale_actions and isinstance(env.action_space, gym.spaces.Box):
        # the spec (bounds, random play, clipping) then reads -1..1 from the wrapped space
        env = gym.wrappers.RescaleAction(env, -1.0, 1.0)
    return env


_mujoco_warnings: set[str] | None = None  # what this process has logged (None: MuJoCo's own handler)


def _log_mujoco_warnings() -> None:
    """Each distinct MuJoCo warning once per process, to Python logging (INFO: a rank's train.log
    where its logging is set up, else nowhere). MuJoCo's own handler prints every warning to
    stderr and appends it to MUJOCO_LOG.TXT in the working directory, and mujoco 3.x warns on
    every HalfCheetah-v5 made (gymnasium's model uses a deprecated attribute): a file in the
    directory each run starts from, and a line per env on the console."""
    global _mujoco_warnings
    if _mujoco_warnings is not None:
        return
    import mujoco
    _mujoco_warnings = set()

    def log_once(message: str) -> None:
        if message not in _mujoco_warnings:
            _mujoco_warnings.add(message)
            logging.getLogger(__name__).info("mujoco: %s", message)

    mujoco.set_mju_user_warning(log_once)


def spec(env_cfg) -> EnvSpec:
    env = _make(env_cfg)
    try:
        return _spec_of(env_cfg.id, env)
    finally:
        env.close()


def _spec_of(env_id: str, env) -> EnvSpec:
    return EnvSpec(tuple(env.observation_space.shape), np.float32, **_actions(env_id, env.action_space))


def _actions(env_id: str, space) -> dict:
    """EnvSpec's action fields for a Discrete (one head) or a flat Box (continuous dims) action space."""
    import gymnasium as gym
    if isinstance(space, gym.spaces.Discrete):
        return dict(action_heads=(int(space.n),))
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(f"env=gym supports Discrete and Box action spaces, '{env_id}' has {space}")
    if len(space.shape) != 1:
        raise ConfigError(f"env=gym supports flat Box action spaces, '{env_id}' has shape {space.shape}")
    if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        # random actions are uniform between the bounds, and the policy's samples are clipped to them
        raise ConfigError(f"env=gym needs finite Box action bounds, '{env_id}' has {space}")
    return dict(action_heads=(), action_low=tuple(float(x) for x in space.low),
                action_high=tuple(float(x) for x in space.high))


class GymEnv:
    def __init__(self, env_cfg, seed: int):
        self.env = _make(env_cfg)
        self.spec = _spec_of(env_cfg.id, self.env)
        self.frameskip = env_cfg.frameskip
        self._seed = seed
        # a Box: the bounds the policy's unbounded samples are clipped to; None: Discrete
        self.bounds = None
        if self.spec.continuous and env_cfg.clip_actions:
            self.bounds = (np.array(self.spec.action_low, np.float32), np.array(self.spec.action_high, np.float32))

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None  # seed the first episode only; later ones follow the env's own RNG
        return obs

    def step(self, action):
        """action: an int (Discrete) or a float32 array of spec.continuous values (Box), clipped here
        unless env.clip_actions is false."""
        if not self.spec.continuous:
            action = int(action)
        elif self.bounds is not None:
            action = np.clip(action, *self.bounds)
        total = 0.0
        for _ in range(self.frameskip):
            obs, reward, terminated, truncated, _ = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        done = terminated or truncated
        return (None if done else obs), total, done, TRUNCATED if truncated and not terminated else NO_INFO

    def close(self) -> None:
        self.env.close()


def make(env_cfg, seed: int) -> GymEnv:
    return GymEnv(env_cfg, seed)
