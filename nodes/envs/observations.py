"""Named observations: a gymnasium observation space -> the keys the model reads, and each
observation -> the (pixels, vector) pair the sampler's buffers hold.

The buffers hold two tensors per step (nodes.sampling.buffers): `obs` (one image, uint8, or one
float32 vector) and `meas` (a float32 vector). An env whose observation is a Dict of images and
vectors (MiniGrid, NetHack, most robotics envs) or anything but one flat vector is stored in that
pair: the largest uint8 image is `obs`, every other key is flattened into one float32 vector (after
`obs` when there is no image), each key at its own slice. EnvSpec.keys says where each key lives,
so the model reads them back by name (nodes.models.inputs) and gives each its own encoder. The
sampler, the policy workers and the learner never see the keys: two tensors, as for VizDoom's
frame and game variables.

A key is one of
    pixels       uint8 HxWxC, CxHxW or HxW (stored as CxHxW; channels-last when the last dim is
                 1, 3 or 4 and the first is not, or env.channels says so)
    vector       any other Box (float, int, a 1-D uint8 row), MultiBinary: float32, flattened
    categorical  Discrete or MultiDiscrete: the class indices (exact in float32 up to 2^24), one-hot
                 in the model
Text, Sequence, Graph and nested spaces are refused unless env.drop_keys drops them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nodes.errors import ConfigError

PIXELS, VECTOR, CATEGORICAL = "pixels", "vector", "categorical"


@dataclass(frozen=True)
class ObsKey:
    """One named observation entry, as the model reads it back from the buffers' pair."""

    name: str
    kind: str  # pixels | vector | categorical
    shape: tuple[int, ...]  # as the model gets it: pixels C,H,W; others the space's own shape
    classes: int = 0  # categorical: classes per index (MultiDiscrete: its largest)
    in_obs: bool = False  # stored as the buffers' `obs` (an image), else a slice of the float vector
    start: int = 0  # the slice of the float vector
    stop: int = 0
    layout: str = ""  # the env's pixel layout: hwc | chw | hw (pixels only)
    low: int = 0  # categorical: the space's start (a Discrete(n, start)), taken off each index
    whole: bool = False  # the env's whole observation (not a Dict): the env gives it bare, not in a dict

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def keys_of(space, label: str, drop_keys=(), channels: str = "auto") -> tuple[ObsKey, ...]:
    """The keys of a gymnasium observation space, stored as described above. label names the env in
    errors (one line each)."""
    import gymnasium as gym
    drop = list(drop_keys)
    if isinstance(space, gym.spaces.Dict):
        missing = [k for k in drop if k not in space.spaces]
        if missing:
            raise ConfigError(f"env.drop_keys: '{missing[0]}' is not a key of {label}'s observation "
                              f"(keys: {', '.join(space.spaces)})")
        named = [(k, s) for k, s in space.spaces.items() if k not in drop]
        if not named:
            raise ConfigError(f"env.drop_keys leaves {label} nothing to observe")
    else:
        if drop:
            raise ConfigError(f"env.drop_keys: {label}'s observation is not a Dict, it has no keys to drop")
        return _place([_with(_key("obs", space, f"{label}: the observation", channels, False), whole=True)])
    return _place([_key(name, s, f"{label}: observation key '{name}'", channels, True) for name, s in named])


def _key(name: str, space, where: str, channels: str, in_dict: bool) -> ObsKey:
    import gymnasium as gym
    if isinstance(space, gym.spaces.Discrete):
        return ObsKey(name, CATEGORICAL, (), classes=int(space.n), low=int(space.start))
    if isinstance(space, gym.spaces.MultiDiscrete):
        if np.any(space.start != space.start.flat[0]):
            raise ConfigError(f"{where} is a MultiDiscrete whose entries start at different values, which the "
                              "one-hot encoder does not take: shift it to one start in your env")
        return ObsKey(name, CATEGORICAL, tuple(space.shape), classes=int(np.max(space.nvec)),
                      low=int(space.start.flat[0]))
    if isinstance(space, gym.spaces.MultiBinary):
        return ObsKey(name, VECTOR, tuple(int(x) for x in np.atleast_1d(space.shape)))
    if not isinstance(space, gym.spaces.Box):
        drop = f": drop it with env.drop_keys=[{name}]" if in_dict else ""
        raise ConfigError(f"{where} is {type(space).__name__}, which no encoder takes{drop}")
    shape = tuple(int(x) for x in space.shape)
    if space.dtype == np.uint8 and (len(shape) in (2, 3) or len(shape) == 4 and shape[3] in (1, 3, 4)):
        return _pixels(name, shape, channels, where)
    if len(shape) > 3:
        raise ConfigError(f"{where} has shape {shape} dtype {space.dtype}: supported are vectors and arrays of "
                          "up to 3 dims, HxWxC / CxHxW / HxW uint8 images and stacks of them (SxHxWxC)")
    return ObsKey(name, VECTOR, shape or (1,))


def _pixels(name: str, shape: tuple[int, ...], channels: str, where: str) -> ObsKey:
    if len(shape) == 2:
        return ObsKey(name, PIXELS, (1, *shape), layout="hw")
    if len(shape) == 4:  # gymnasium's FrameStackObservation of HxWxC frames: the stack's channels side by side
        return ObsKey(name, PIXELS, (shape[0] * shape[3], shape[1], shape[2]), layout="shwc")
    last = shape[2] in (1, 3, 4)
    first = shape[0] in (1, 3, 4)
    if channels == "last" or (channels == "auto" and last):
        return ObsKey(name, PIXELS, (shape[2], shape[0], shape[1]), layout="hwc")
    if channels == "first" or first:
        return ObsKey(name, PIXELS, shape, layout="chw")
    raise ConfigError(f"{where} is a {shape} uint8 array whose channels are neither first nor last (1, 3 or 4): "
                      "say which with env.channels=first or env.channels=last")


def _place(keys: list[ObsKey]) -> tuple[ObsKey, ...]:
    """The largest image becomes the buffers' `obs`; the rest share the float vector, in order."""
    images = [k for k in keys if k.kind == PIXELS]
    main = max(images, key=lambda k: k.size).name if images else None
    out, offset = [], 0
    for k in keys:
        if k.name == main:
            out.append(_with(k, in_obs=True))
        else:
            out.append(_with(k, start=offset, stop=offset + k.size))
            offset += k.size
    return tuple(out)


def _with(k: ObsKey, **changes) -> ObsKey:
    return ObsKey(**{**k.__dict__, **changes})


def stored(keys: tuple[ObsKey, ...]) -> tuple[tuple[int, ...], type, int]:
    """(obs_shape, obs_dtype, meas_size) of EnvSpec for these keys: the image and the float vector,
    or the float vector alone as `obs`."""
    vector = sum(k.size for k in keys if not k.in_obs)
    image = next((k for k in keys if k.in_obs), None)
    if image is None:
        return (vector,), np.float32, 0
    return image.shape, np.uint8, vector


class Packer:
    """One observation as the env gives it (an array, or a dict for a Dict space) -> what the
    buffers take: the image, the float vector, or the (image, vector) pair (nodes.envs's contract)."""

    def __init__(self, keys: tuple[ObsKey, ...]):
        self.keys = keys
        self.image = next((k for k in keys if k.in_obs), None)
        self.rest = [k for k in keys if not k.in_obs]
        self.size = sum(k.size for k in self.rest)
        self.single = keys[0].whole  # not a Dict space: the env gives the array bare

    def __call__(self, obs):
        if self.single:
            obs = {"obs": obs}
        vec = None
        if self.rest:
            vec = np.empty(self.size, np.float32)
            for k in self.rest:
                vec[k.start : k.stop] = np.ravel(_as_stored(k, obs[k.name]))
        if self.image is None:
            return vec
        img = _as_stored(self.image, obs[self.image.name])
        return img if vec is None else (img, vec)


def _as_stored(k: ObsKey, x):
    if k.low:
        return np.asarray(x) - k.low
    if k.layout == "hwc":
        return np.asarray(x).transpose(2, 0, 1)
    if k.layout == "hw":
        return np.asarray(x)[None]
    if k.layout == "shwc":
        return np.asarray(x).transpose(0, 3, 1, 2).reshape(k.shape)
    return x


def check_observation(keys: tuple[ObsKey, ...], space, obs, label: str, call: str = "reset()") -> None:
    """ConfigError (one line) unless `obs` matches the declared space: every key there, each of its
    declared shape and dtype kind (a float where uint8 is declared is refused), categorical indices
    in range."""
    import gymnasium as gym
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict):
            raise ConfigError(f"{label}: {call} gave a {type(obs).__name__}, its space is a Dict")
        spaces = space.spaces
    else:
        obs, spaces = {"obs": obs}, {"obs": space}
    for k in keys:
        if k.name not in obs:
            raise ConfigError(f"{label}: {call} gave no key '{k.name}' (keys: {', '.join(map(str, obs))})")
        x, s = np.asarray(obs[k.name]), spaces[k.name]
        what = "the observation" if k.whole else f"key '{k.name}'"
        declared_shape = tuple(s.shape) if s.shape is not None else ()
        # a Box's dtype kind too (a float where uint8 pixels are declared); Discrete, MultiDiscrete and
        # MultiBinary take any integer or bool array that fits (gymnasium's own contains)
        kind_differs = isinstance(s, gym.spaces.Box) and x.dtype.kind != np.dtype(s.dtype).kind
        if x.shape != declared_shape or kind_differs:
            raise ConfigError(f"{label}: {call} gave {what} {x.shape} {x.dtype}, its space declares "
                              f"{declared_shape} {s.dtype}")
        if k.kind == CATEGORICAL and not s.contains(x.astype(s.dtype)):
            raise ConfigError(f"{label}: {call} gave {what} {x.tolist()}, outside its space {s}")
