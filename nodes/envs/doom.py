"""VizDoom scenarios with one discrete action head.

Rendering happens at 160x120 (the smallest 4:3 mode VizDoom has) and is resized to
env.width x env.height (128x72 by default, the seed paper's benchmark size) with
nearest-neighbour index arrays computed once. Actions: no-op plus each available button alone.
"""
from __future__ import annotations

import os

import numpy as np

from nodes.envs import NO_INFO, EnvSpec

RENDER_W, RENDER_H = 160, 120


def _vizdoom():
    try:
        import vizdoom
    except ImportError as exc:  # pragma: no cover - depends on the machine
        from nodes.config import ConfigError
        raise ConfigError(f"VizDoom engine missing: pip install vizdoom ({exc})") from None
    return vizdoom


def scenario_path(env_cfg) -> str:
    vzd = _vizdoom()
    return os.path.join(vzd.scenarios_path, env_cfg.id)


def check(env_cfg) -> None:
    from nodes.config import ConfigError
    if not env_cfg.id.endswith(".cfg"):
        raise ConfigError(f"env.id for a VizDoom env must name a scenario .cfg, got '{env_cfg.id}'")
    if not os.path.isfile(scenario_path(env_cfg)):
        raise ConfigError(f"VizDoom scenario '{env_cfg.id}' is not bundled with vizdoom ({scenario_path(env_cfg)})")
    if env_cfg.width > RENDER_W or env_cfg.height > RENDER_H or min(env_cfg.width, env_cfg.height) < 16:
        raise ConfigError(f"env.width x env.height must be between 16x16 and {RENDER_W}x{RENDER_H}, got {env_cfg.width}x{env_cfg.height}")


def _buttons(env_cfg):
    vzd = _vizdoom()
    game = vzd.DoomGame()
    game.load_config(scenario_path(env_cfg))
    return game.get_available_buttons()


def spec(env_cfg) -> EnvSpec:
    return EnvSpec((3, env_cfg.height, env_cfg.width), np.uint8, (len(_buttons(env_cfg)) + 1,))


class DoomEnv:
    def __init__(self, env_cfg, seed: int):
        vzd = _vizdoom()
        self.spec = spec(env_cfg)
        self.frameskip = env_cfg.frameskip
        game = vzd.DoomGame()
        game.load_config(scenario_path(env_cfg))
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.CRCGCB)  # channels first: no transpose needed
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        if env_cfg.episode_timeout:
            game.set_episode_timeout(env_cfg.episode_timeout)
        game.set_seed(seed % (2**31))
        game.init()
        self.game = game
        n = len(game.get_available_buttons())
        self.actions = [[0] * n] + [list(row) for row in np.eye(n, dtype=int)]
        h, w = env_cfg.height, env_cfg.width
        self._rows = ((np.arange(h) + 0.5) * RENDER_H / h).astype(np.intp)[:, None]
        self._cols = ((np.arange(w) + 0.5) * RENDER_W / w).astype(np.intp)[None, :]

    def _obs(self) -> np.ndarray:
        state = self.game.get_state()
        if state is None:  # episode over: the next reset() supplies the real observation
            return np.zeros(self.spec.obs_shape, np.uint8)
        return state.screen_buffer[:, self._rows, self._cols]

    def reset(self) -> np.ndarray:
        self.game.new_episode()
        return self._obs()

    def step(self, action: int):
        reward = self.game.make_action(self.actions[int(action)], self.frameskip)
        done = self.game.is_episode_finished()
        return (None if done else self._obs()), reward, done, NO_INFO

    def close(self) -> None:
        self.game.close()


def make(env_cfg, seed: int) -> DoomEnv:
    return DoomEnv(env_cfg, seed)
