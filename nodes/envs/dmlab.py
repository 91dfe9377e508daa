"""DeepMind Lab levels (`env=dmlab_<level>`, or `env=dmlab env.id=<level>`) with one discrete head.

Targets the documented `deepmind_lab.Lab` Python API (github.com/deepmind/lab,
docs/users/python_api.md): Lab(level, observations, config=<str -> str>, renderer,
level_cache), reset(seed=...), step(np.intc action, num_steps=frameskip) -> reward,
observations(), is_running(). The engine is not on PyPI: it is built from source with Bazel.

Observation: the "RGB" observation, already channels-first (3 x height x width uint8), so no
transpose on the hot path. Actions: the IMPALA discretised action set (below), each repeated
for env.frameskip engine frames by `num_steps`. Generated level layouts are kept in a
directory-backed level cache (env.level_cache_dir) shared by every env on the machine, so
each layout is compiled once.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil

import numpy as np

from nodes.envs import NO_INFO, EnvSpec
from nodes.errors import ConfigError, one_line

# The IMPALA action set (Espeholt et al. 2018), DEFAULT_ACTION_SET in
# github.com/deepmind/scalable_agent/blob/master/environments.py; Sample Factory's
# envs/dmlab ACTION_SET and seed_rl's dmlab/env.py use the same nine rows. Columns follow
# Lab.action_spec(): LOOK_LEFT_RIGHT_PIXELS_PER_FRAME, LOOK_DOWN_UP_PIXELS_PER_FRAME,
# STRAFE_LEFT_RIGHT, MOVE_BACK_FORWARD, FIRE, JUMP, CROUCH.
ACTION_SET = (
    (0, 0, 0, 1, 0, 0, 0),    # forward
    (0, 0, 0, -1, 0, 0, 0),   # backward
    (0, 0, -1, 0, 0, 0, 0),   # strafe left
    (0, 0, 1, 0, 0, 0, 0),    # strafe right
    (-20, 0, 0, 0, 0, 0, 0),  # look left
    (20, 0, 0, 0, 0, 0, 0),   # look right
    (-20, 0, 0, 1, 0, 0, 0),  # look left + forward
    (20, 0, 0, 1, 0, 0, 0),   # look right + forward
    (0, 0, 0, 0, 1, 0, 0),    # fire
)
ACTION_NAMES = ("LOOK_LEFT_RIGHT_PIXELS_PER_FRAME", "LOOK_DOWN_UP_PIXELS_PER_FRAME", "STRAFE_LEFT_RIGHT",
                "MOVE_BACK_FORWARD", "FIRE", "JUMP", "CROUCH")

OBSERVATION = "RGB"  # 3 x H x W uint8
ENGINE_HINT = ("build it from https://github.com/deepmind/lab (bazel build -c opt "
               "//python/pip_package:build_pip_package, then pip install the wheel it writes); "
               "see docs/environments.md")
_LEVEL_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")


def _deepmind_lab():
    try:
        import deepmind_lab
    except ImportError as exc:
        raise ConfigError(f"DeepMind Lab engine not found ({one_line(exc)}): {ENGINE_HINT}") from None
    return deepmind_lab


def cache_dir(env_cfg) -> str:
    return os.path.expanduser(env_cfg.level_cache_dir or os.path.join("~", ".cache", "distrl", "dmlab"))


class LevelCache:
    """Directory-backed level cache with the interface Lab(level_cache=...) calls.

    fetch(key, pk3_path) -> bool copies a cached layout to where the engine wants it;
    write(key, pk3_path) stores a freshly generated one. Writes go through a temp file and an
    atomic rename, so envs in many processes can share one directory.
    """

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def path(self, key: str) -> str:
        name = key if re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", key) and not key.startswith(".") \
            else hashlib.sha1(key.encode()).hexdigest()
        return os.path.join(self.directory, name)

    def fetch(self, key, pk3_path) -> bool:
        path = self.path(key)
        try:
            shutil.copyfile(path, pk3_path)
        except FileNotFoundError:
            return False
        return True

    def write(self, key, pk3_path) -> None:
        path = self.path(key)
        if os.path.isfile(path):
            return
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            shutil.copyfile(pk3_path, tmp)
            os.replace(tmp, path)
        except OSError:  # a full or read-only cache costs a recompile later, never the run
            with contextlib.suppress(OSError):
                os.remove(tmp)


def check(env_cfg) -> None:
    if not env_cfg.id:
        raise ConfigError("env=dmlab needs env.id (a level name), e.g. env.id=seekavoid_arena_01 or "
                          "env.id=contributed/dmlab30/rooms_collect_good_objects_train")
    if not _LEVEL_RE.match(env_cfg.id) or ".." in env_cfg.id.split("/"):
        raise ConfigError(f"env.id for a DeepMind Lab env must be a level name like 'seekavoid_arena_01', "
                          f"got '{env_cfg.id}'")
    if min(env_cfg.width, env_cfg.height) < 16 or max(env_cfg.width, env_cfg.height) > 1024:
        raise ConfigError(f"env.width x env.height must be between 16x16 and 1024x1024, "
                          f"got {env_cfg.width}x{env_cfg.height}")
    _deepmind_lab()


def spec(env_cfg) -> EnvSpec:
    return EnvSpec((3, env_cfg.height, env_cfg.width), np.uint8, (len(ACTION_SET),))


def lab_config(env_cfg) -> dict:
    """The Lab config dict: every value a string, as the API requires."""
    config = {"width": str(env_cfg.width), "height": str(env_cfg.height), "fps": "60"}
    if env_cfg.id.endswith("_test"):  # DMLab-30 held-out test levels refuse to load without it
        config["allowHoldOutLevels"] = "true"
    return config


class DMLabEnv:
    def __init__(self, env_cfg, seed: int):
        lab = _deepmind_lab()
        self.spec = spec(env_cfg)
        self.frameskip = int(env_cfg.frameskip)
        self.level_cache = LevelCache(cache_dir(env_cfg))
        self.lab = lab.Lab(env_cfg.id, [OBSERVATION], config=lab_config(env_cfg), renderer="software",
                           level_cache=self.level_cache)
        names = tuple(a["name"] for a in self.lab.action_spec())
        if names != ACTION_NAMES:
            raise RuntimeError(f"DeepMind Lab action_spec {names} differs from the documented {ACTION_NAMES}")
        self.actions = [np.array(row, dtype=np.intc) for row in ACTION_SET]
        self._rng = np.random.RandomState(seed % (2**31))
        self._last = None

    def _obs(self) -> np.ndarray:
        self._last = self.lab.observations()[OBSERVATION]
        return self._last

    def reset(self) -> np.ndarray:
        # A fresh engine seed per episode, drawn from the env's own seeded stream (as IMPALA does):
        # runs are reproducible per seed, episodes differ.
        self.lab.reset(seed=int(self._rng.randint(0, 2**31 - 1)))
        return self._obs()

    def step(self, action):
        reward = float(self.lab.step(self.actions[int(action)], num_steps=self.frameskip))
        if not self.lab.is_running():
            return None, reward, True, NO_INFO
        return self._obs(), reward, False, NO_INFO

    def render(self) -> np.ndarray:
        if self._last is None:
            return np.zeros((self.spec.obs_shape[1], self.spec.obs_shape[2], 3), np.uint8)
        return np.ascontiguousarray(self._last.transpose(1, 2, 0))

    def close(self) -> None:
        self.lab.close()


def make(env_cfg, seed: int) -> DMLabEnv:
    return DMLabEnv(env_cfg, seed)
