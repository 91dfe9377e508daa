"""Any gymnasium env with a flat Box observation and a Discrete action space (fast tests)."""
from __future__ import annotations

import importlib

import numpy as np

from nodes.envs import NO_INFO, EnvSpec
from nodes.errors import ConfigError


def check(env_cfg) -> None:
    import gymnasium as gym
    if not env_cfg.id:
        raise ConfigError("env=gym needs env.id, e.g. env.id=CartPole-v1")
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


def spec(env_cfg) -> EnvSpec:
    import gymnasium as gym
    env = gym.make(env_cfg.id)
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(f"env=gym supports Discrete action spaces, '{env_cfg.id}' has {env.action_space}")
        return EnvSpec(tuple(env.observation_space.shape), np.float32, (int(env.action_space.n),))
    finally:
        env.close()


class GymEnv:
    def __init__(self, env_cfg, seed: int):
        import gymnasium as gym
        self.env = gym.make(env_cfg.id)
        self.spec = spec(env_cfg)
        self.frameskip = env_cfg.frameskip
        self._seed = seed

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None  # seed the first episode only; later ones follow the env's own RNG
        return obs

    def step(self, action: int):
        total = 0.0
        for _ in range(self.frameskip):
            obs, reward, terminated, truncated, _ = self.env.step(int(action))
            total += float(reward)
            if terminated or truncated:
                break
        done = terminated or truncated
        return (None if done else obs), total, done, NO_INFO

    def close(self) -> None:
        self.env.close()


def make(env_cfg, seed: int) -> GymEnv:
    return GymEnv(env_cfg, seed)
