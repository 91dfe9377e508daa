"""env.rescale_actions: the policy acts in -1..1 per dimension of every Box of the env's action
space, mapped linearly onto that Box's own low..high before the env sees it: one Box (gymnasium's
RescaleAction), or each Box of a Tuple (its other parts as they are). The spec then reads -1..1
from the wrapped space, so random play and env.clip_actions work in the policy's units.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


def rescaled(env: gym.Env) -> gym.Env:
    """env with each Box of its action space in units of the bounds; env itself where it has none."""
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        return gym.wrappers.RescaleAction(env, -1.0, 1.0)
    if isinstance(space, gym.spaces.Tuple) and any(isinstance(part, gym.spaces.Box) for part in space.spaces):
        return RescaleTupleBoxes(env)
    return env


class RescaleTupleBoxes(gym.ActionWrapper):
    """A Tuple action whose Boxes take -1..1: RescaleAction's line, part by part (past -1..1, the
    same line beyond the bounds: clipping is env.clip_actions' job, before this)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._parts = env.action_space.spaces
        self.action_space = gym.spaces.Tuple(
            gym.spaces.Box(-1.0, 1.0, part.shape, part.dtype) if isinstance(part, gym.spaces.Box) else part
            for part in self._parts)

    def action(self, action):
        return tuple(_onto(part, a) if isinstance(part, gym.spaces.Box) else a for part, a in zip(self._parts, action))


def _onto(box: gym.spaces.Box, unit):
    """-1..1 -> box.low..box.high, linearly."""
    return (box.low + (np.asarray(unit, np.float64) + 1.0) * 0.5 * (box.high - box.low)).astype(box.dtype)
