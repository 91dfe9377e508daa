"""Test stand-in for the DeepMind Lab Python module (`import deepmind_lab`).

NOT the engine: a small pure-numpy arena that implements the documented `deepmind_lab.Lab`
API (github.com/deepmind/lab, docs/users/python_api.md) strictly enough to catch misuse:

* Lab(level, observations, config={}, renderer='software', level_cache=None): the level must be
  known, observations a list of names from observation_spec(), config a dict of str -> str
  (width/height/fps parsed from it; DMLab-30 *_test levels need allowHoldOutLevels='true'),
  renderer 'software' or 'hardware', level_cache None or an object with
  fetch(key, pk3_path) -> bool and write(key, pk3_path).
* reset(episode=-1, seed=None) loads the episode's map: through the level cache when one is
  given (fetch; on a miss the map is "compiled" into a .pk3 file and handed to write()).
* step(action, num_steps=1) -> float: action a 1-D np.intc array of len(action_spec()), every
  entry within its min/max; num_steps engine frames pass (num_steps() counts frames); the
  episode ends after EPISODE_FRAMES frames (is_running() turns False).
* observations() -> dict: only while running; RGB (3xHxW), RGB_INTERLEAVED (HxWx3), ... uint8
  frames that depend on the agent's position and heading.
* After close() only is_running() may be called.

Counters in STATS (compiled, fetched maps) let tests see what the level cache did.
"""
from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np

__version__ = "standin"

EPISODE_FRAMES = int(os.environ.get("DMLAB_STANDIN_EPISODE_FRAMES", "240"))
NUM_LAYOUTS = 4  # distinct generated maps per level; an episode's seed picks one

STATS = {"compiled": 0, "fetched": 0, "constructed": 0}

_ACTION_SPEC = (
    {"name": "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME", "min": -512, "max": 512},
    {"name": "LOOK_DOWN_UP_PIXELS_PER_FRAME", "min": -512, "max": 512},
    {"name": "STRAFE_LEFT_RIGHT", "min": -1, "max": 1},
    {"name": "MOVE_BACK_FORWARD", "min": -1, "max": 1},
    {"name": "FIRE", "min": 0, "max": 1},
    {"name": "JUMP", "min": 0, "max": 1},
    {"name": "CROUCH", "min": 0, "max": 1},
)

LEVELS = {
    "seekavoid_arena_01", "lt_chasm", "lt_hallway_slope", "lt_horseshoe_color", "lt_space_bounce_hard",
    "nav_maze_random_goal_01", "nav_maze_static_01", "stairway_to_melon", "tests/empty_room_test",
} | {f"contributed/dmlab30/{name}_{split}" for split in ("train", "test") for name in (
    "rooms_collect_good_objects", "rooms_exploit_deferred_effects", "rooms_select_nonmatching_object",
    "rooms_watermaze", "rooms_keys_doors_puzzle", "language_select_described_object",
    "language_select_located_object", "language_execute_random_task", "language_answer_quantitative_question",
    "lasertag_one_opponent_small", "lasertag_three_opponents_small", "lasertag_one_opponent_large",
    "lasertag_three_opponents_large", "natlab_fixed_large_map", "natlab_varying_map_regrowth",
    "natlab_varying_map_randomized", "skymaze_irreversible_path_hard", "skymaze_irreversible_path_varied",
    "psychlab_arbitrary_visuomotor_mapping", "psychlab_continuous_recognition",
    "psychlab_sequential_comparison", "psychlab_visual_search", "explore_object_locations_small",
    "explore_object_locations_large", "explore_obstructed_goals_small", "explore_obstructed_goals_large",
    "explore_goal_locations_small", "explore_goal_locations_large", "explore_object_rewards_few",
    "explore_object_rewards_many")}


def _observation_spec(h: int, w: int):
    return [
        {"name": "RGB_INTERLEAVED", "dtype": np.uint8, "shape": (h, w, 3)},
        {"name": "RGBD_INTERLEAVED", "dtype": np.uint8, "shape": (h, w, 4)},
        {"name": "RGB", "dtype": np.uint8, "shape": (3, h, w)},
        {"name": "RGBD", "dtype": np.uint8, "shape": (4, h, w)},
        {"name": "BGR_INTERLEAVED", "dtype": np.uint8, "shape": (h, w, 3)},
        {"name": "MAP_FRAME_NUMBER", "dtype": np.float64, "shape": (1,)},
        {"name": "DEBUG.POS.TRANS", "dtype": np.float64, "shape": (3,)},
        {"name": "DEBUG.POS.ROT", "dtype": np.float64, "shape": (3,)},
    ]


def version():
    return __version__


def runfiles_path():
    return os.path.dirname(os.path.abspath(__file__))


def set_runfiles_path(path):
    if not isinstance(path, str):
        raise TypeError("runfiles path must be a string")


class Lab:
    def __init__(self, level, observations, config=None, renderer="software", level_cache=None):
        if not isinstance(level, str):
            raise TypeError(f"level must be a string, got {type(level).__name__}")
        if level not in LEVELS:
            raise ValueError(f"Failed to open level '{level}': no such level script")
        if not isinstance(observations, (list, tuple)) or not all(isinstance(o, str) for o in observations):
            raise TypeError("observations must be a list of observation names (strings)")
        config = {} if config is None else config
        if not isinstance(config, dict):
            raise TypeError("config must be a dict of strings")
        for k, v in config.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"config keys and values must be strings, got {k!r}: {v!r}")
        if renderer not in ("software", "hardware"):
            raise ValueError(f"renderer must be 'software' or 'hardware', got {renderer!r}")
        if level_cache is not None and not (callable(getattr(level_cache, "fetch", None))
                                            and callable(getattr(level_cache, "write", None))):
            raise TypeError("level_cache must have fetch(key, pk3_path) and write(key, pk3_path)")
        try:
            self._w, self._h = int(config.get("width", "320")), int(config.get("height", "240"))
            self._fps = int(config.get("fps", "60"))
        except ValueError:
            raise ValueError(f"width/height/fps must be integer strings, got {config}") from None
        if level.startswith("contributed/dmlab30/") and level.endswith("_test") \
                and config.get("allowHoldOutLevels") != "true":
            raise RuntimeError(f"Level '{level}' is a held-out test level: set config allowHoldOutLevels='true'")
        spec_names = {o["name"] for o in _observation_spec(self._h, self._w)}
        for name in observations:
            if name not in spec_names:
                raise ValueError(f"Unknown observation '{name}'")
        self._level, self._observations, self._cache = level, list(observations), level_cache
        self._running = False
        self._closed = False
        self._frames = 0
        self._episode = -1
        self._map = None
        self._tmpdir = tempfile.mkdtemp(prefix="dmlab_standin_")
        # a fixed background texture; the view into it scrolls with heading and position
        yy, xx = np.mgrid[0:self._h, 0:4 * self._w]
        self._texture = np.stack([(xx * 255 // (4 * self._w)), (yy * 255 // max(self._h - 1, 1)),
                                  ((xx // 8 + yy // 8) % 2) * 200], axis=-1).astype(np.uint8)
        STATS["constructed"] += 1

    # -- map loading through the level cache -------------------------------------------------
    def _load_map(self, layout: int) -> np.ndarray:
        key = hashlib.md5(f"{self._level}:{layout}".encode()).hexdigest() + ".pk3"
        pk3 = os.path.join(self._tmpdir, key)
        found = self._cache.fetch(key, pk3) if self._cache is not None else False
        if not isinstance(found, bool):
            raise TypeError("level_cache.fetch must return a bool")
        if found:
            STATS["fetched"] += 1
            return np.load(pk3, allow_pickle=False)
        STATS["compiled"] += 1
        rng = np.random.RandomState(layout)
        goals = rng.uniform(1, 9, size=(3, 2))
        with open(pk3, "wb") as f:
            np.save(f, goals)
        if self._cache is not None:
            self._cache.write(key, pk3)
        return goals

    # -- documented methods -----------------------------------------------------------------
    def _alive(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"Environment closed: cannot call {what}()")

    def reset(self, episode=-1, seed=None):
        self._alive("reset")
        if not isinstance(episode, int) or (seed is not None and not isinstance(seed, int)):
            raise TypeError("episode and seed must be integers")
        self._episode = episode if episode >= 0 else self._episode + 1
        seed = seed if seed is not None else np.random.randint(0, 2**31 - 1)
        rng = np.random.RandomState(seed % (2**32))
        self._goals = self._load_map(int(rng.randint(NUM_LAYOUTS))).copy()
        self._pos = rng.uniform(2, 8, size=2)
        self._yaw = float(rng.uniform(-180, 180))
        self._frames = 0
        self._running = True
        return True

    def is_running(self):
        return self._running and not self._closed

    def num_steps(self):
        self._alive("num_steps")
        return self._frames

    def fps(self):
        return self._fps

    def action_spec(self):
        self._alive("action_spec")
        return [dict(a) for a in _ACTION_SPEC]

    def observation_spec(self):
        self._alive("observation_spec")
        return _observation_spec(self._h, self._w)

    def events(self):
        self._alive("events")
        return []

    def step(self, action, num_steps=1):
        self._alive("step")
        if not self._running:
            raise RuntimeError("Environment in wrong status to advance: call reset() first")
        if not isinstance(action, np.ndarray) or action.dtype != np.intc:
            raise TypeError(f"action must be a numpy array of dtype np.intc, got "
                            f"{type(action).__name__} {getattr(action, 'dtype', '')}")
        if action.shape != (len(_ACTION_SPEC),):
            raise ValueError(f"action must have shape ({len(_ACTION_SPEC)},), got {action.shape}")
        for v, s in zip(action.tolist(), _ACTION_SPEC):
            if not s["min"] <= v <= s["max"]:
                raise ValueError(f"action {s['name']}={v} outside [{s['min']}, {s['max']}]")
        if not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
        look, _, strafe, move, fire = action.tolist()[:5]
        reward = 0.0
        for _ in range(min(num_steps, EPISODE_FRAMES - self._frames)):
            self._yaw = (self._yaw + look * 0.05 + 180.0) % 360.0 - 180.0
            r = np.radians(self._yaw)
            fwd, side = np.array([np.cos(r), np.sin(r)]), np.array([-np.sin(r), np.cos(r)])
            self._pos = np.clip(self._pos + 0.05 * (move * fwd + strafe * side), 0.0, 10.0)
            hit = np.linalg.norm(self._goals - self._pos, axis=1) < 0.6
            if hit.any():  # an apple: +1, and it moves elsewhere
                reward += float(hit.sum())
                self._goals[hit] = (self._goals[hit] * 7.3 + 3.1) % 8 + 1
            reward -= 0.001 * fire
            self._frames += 1
        if self._frames >= EPISODE_FRAMES:
            self._running = False
        return reward

    def _frame(self) -> np.ndarray:
        h, w = self._h, self._w
        shift = int((self._yaw + 180.0) / 360.0 * 3 * w)
        img = self._texture[:, shift:shift + w].copy()
        # the nearest goal as a block whose size grows as the agent gets closer
        d = float(np.min(np.linalg.norm(self._goals - self._pos, axis=1)))
        size = max(1, int(min(h, w) / (1.0 + d)))
        img[h // 2 - size // 2:h // 2 + (size + 1) // 2, w // 2 - size // 2:w // 2 + (size + 1) // 2] = (255, 32, 32)
        img[-2:, :int(w * self._frames / EPISODE_FRAMES)] = 255  # a time bar
        return img

    def observations(self):
        self._alive("observations")
        if not self._running:
            raise RuntimeError("Environment in wrong status to call observations()")
        rgb = self._frame()
        out = {}
        for name in self._observations:
            if name == "RGB_INTERLEAVED":
                out[name] = rgb
            elif name == "BGR_INTERLEAVED":
                out[name] = np.ascontiguousarray(rgb[..., ::-1])
            elif name == "RGB":
                out[name] = np.ascontiguousarray(rgb.transpose(2, 0, 1))
            elif name in ("RGBD", "RGBD_INTERLEAVED"):
                rgbd = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 128, np.uint8)], axis=-1)
                out[name] = rgbd if name == "RGBD_INTERLEAVED" else np.ascontiguousarray(rgbd.transpose(2, 0, 1))
            elif name == "MAP_FRAME_NUMBER":
                out[name] = np.array([self._frames], np.float64)
            elif name == "DEBUG.POS.TRANS":
                out[name] = np.array([self._pos[0], self._pos[1], 0.0])
            elif name == "DEBUG.POS.ROT":
                out[name] = np.array([0.0, self._yaw, 0.0])
        return out

    def close(self):
        if not self._closed:
            self._closed = True
            self._running = False
            import shutil
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        return True
