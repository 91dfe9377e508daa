"""Env registry: the one place that maps `env.family` to a wrapper.

Every wrapper has the same small interface, used by the rollout workers:
    spec                      EnvSpec (observation shape/dtype, number of actions)
    reset() -> obs            numpy array of spec.obs_shape / spec.obs_dtype
    step(action) -> (obs, reward, done)   reward is the unscaled game reward
    close()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple


@dataclass(frozen=True)
class EnvSpec:
    obs_shape: Tuple[int, ...]
    obs_dtype: Any  # numpy dtype: uint8 for pixels, float32 for vectors
    num_actions: int

    @property
    def is_image(self) -> bool:
        return len(self.obs_shape) == 3


FAMILIES = ("doom", "gym")


def _module(family: str):
    if family == "doom":
        from nodes.envs import doom
        return doom
    if family == "gym":
        from nodes.envs import gym_env
        return gym_env
    from nodes.config import ConfigError
    raise ConfigError(f"unknown env.family '{family}' (available: {', '.join(FAMILIES)})")


def check_env_config(env_cfg) -> None:
    """Raise ConfigError (one line) if this env cannot be created here. Starts no engine."""
    _module(env_cfg.family).check(env_cfg)


def env_spec(env_cfg) -> EnvSpec:
    """Observation/action spec without starting an engine process."""
    return _module(env_cfg.family).spec(env_cfg)


def make_env(env_cfg, seed: int):
    return _module(env_cfg.family).make(env_cfg, seed)
