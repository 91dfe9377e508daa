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

from nodes.envs import NO_INFO, EnvSpec, observations
from nodes.errors import ConfigError, did_you_mean, one_line

TRUNCATED = {"truncated": True}  # a time limit's info: shared, never mutated

# the extra that installs what an env's entry point needs, by the package the entry point is in
EXTRAS = {"gymnasium.envs.mujoco": "mujoco"}


def check(env_cfg):
    """Refuse (one line) an env this wrapper cannot run, and return its spec: one env is made, reset
    once and its first observation checked against its declared space (a factory that raises, an
    observation of another shape or dtype than declared: refused here, before any worker starts)."""
    import gymnasium as gym
    if not env_cfg.make:
        if not env_cfg.id:
            example = "HalfCheetah-v5" if env_cfg.name == "mujoco" else "CartPole-v1"
            raise ConfigError(f"env={env_cfg.name} needs env.id, e.g. env.id={example} "
                              "(or env.make=pkg.module:function)")
        module, _, name = env_cfg.id.rpartition(":")  # "pkg.module:EnvId" registers EnvId on import
        if module:
            _import(module, f"env.id '{env_cfg.id}'")
        if name not in gym.registry:
            raise ConfigError(f"unknown gymnasium env id '{env_cfg.id}'{did_you_mean(name, gym.registry)}")
    env = _make(env_cfg)
    try:
        s = _spec_of(env_cfg, env)
        if s.keys:
            obs = _call(lambda: env.reset(seed=0)[0], f"{label(env_cfg)}: reset()")
            observations.check_observation(s.keys, env.observation_space, obs, label(env_cfg))
        return s
    finally:
        env.close()


def label(env_cfg) -> str:
    """How errors name the env: its id or its factory."""
    return f"env.make '{env_cfg.make}'" if env_cfg.make else f"env.id '{env_cfg.id}'"


def _import(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"cannot import '{module}' for {what}: {one_line(exc)}") from None


def _call(fn, what: str):
    """fn(), any exception of the user's code turned into one line naming what raised."""
    try:
        return fn()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's env raises, the answer is one line
        raise ConfigError(f"{what} raised {type(exc).__name__}: {one_line(exc)}") from None


def _factory(env_cfg):
    """env.make 'pkg.module:function' -> the function (refused in one line when it is not there)."""
    module, _, name = env_cfg.make.rpartition(":")
    if not module or not name:
        raise ConfigError(f"env.make must be 'pkg.module:function', got '{env_cfg.make}'")
    fn = getattr(_import(module, f"env.make '{env_cfg.make}'"), name, None)
    if not callable(fn):
        raise ConfigError(f"env.make '{env_cfg.make}': module '{module}' has no function '{name}'")
    return fn


def _make(env_cfg):
    """gym.make(env.id, **env.kwargs) or env.make's factory(**env.kwargs); a missing package
    (MuJoCo's, Box2D's, ...) refused in one line naming the install."""
    import gymnasium as gym
    kwargs = dict(env_cfg.kwargs)
    if env_cfg.make:
        env = _call(lambda: _factory(env_cfg)(**kwargs), label(env_cfg))
        if not isinstance(env, gym.Env):
            raise ConfigError(f"{label(env_cfg)} returned a {type(env).__name__}, not a gymnasium.Env")
    else:
        # gymnasium's own ids are registered at import ("module:Id" ones only once gym.make imports the module)
        entry = str(getattr(gym.registry.get(env_cfg.id.rpartition(":")[2]), "entry_point", ""))
        extra = next((x for pkg, x in EXTRAS.items() if entry.startswith(pkg)), None)
        try:
            if extra == "mujoco":
                _log_mujoco_warnings()
            env = gym.make(env_cfg.id, **kwargs)
        except (ImportError, gym.error.DependencyNotInstalled) as exc:
            hint = f"; pip install -e '.[{extra}]' in the clone" if extra else ""
            raise ConfigError(f"env.id '{env_cfg.id}' needs a package that is not installed here "
                              f"({one_line(exc)}){hint}") from None
    if env_cfg.rescale_actions:  # every Box, one or in a Tuple: the spec then reads -1..1 from the wrapped space
        from nodes.envs.rescale import rescaled
        env = rescaled(env)
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
        return _spec_of(env_cfg, env)
    finally:
        env.close()


def _spec_of(env_cfg, env) -> EnvSpec:
    """A flat Box observation is today's plain vector (no keys: the model's own MLP path); anything
    else (a Dict, an image, a categorical, an array) is named keys (nodes.envs.observations)."""
    import gymnasium as gym
    space, actions = env.observation_space, _actions(label(env_cfg), env.action_space)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and not env_cfg.drop_keys:
        return EnvSpec((int(space.shape[0]),), np.float32, **actions)
    keys = observations.keys_of(space, label(env_cfg), env_cfg.drop_keys, env_cfg.channels)
    obs_shape, obs_dtype, meas_size = observations.stored(keys)
    return EnvSpec(obs_shape, obs_dtype, meas_size=meas_size, keys=keys, **actions)


def _actions(what: str, space) -> dict:
    """EnvSpec's action fields: Discrete and MultiDiscrete are discrete heads, a flat Box continuous
    dims, a Tuple of them its discrete parts' heads then its Boxes' dims."""
    import gymnasium as gym
    parts = list(space.spaces) if isinstance(space, gym.spaces.Tuple) else [space]
    heads, low, high = [], [], []
    for part in parts:
        if isinstance(part, gym.spaces.Discrete):
            heads.append(int(part.n))
        elif isinstance(part, gym.spaces.MultiDiscrete) and len(part.shape) == 1:
            heads += [int(n) for n in part.nvec]
        elif isinstance(part, gym.spaces.Box) and len(part.shape) == 1:
            if not (np.isfinite(part.low).all() and np.isfinite(part.high).all()):
                # random actions are uniform between the bounds, and the policy's samples are clipped to them
                raise ConfigError(f"env=gym needs finite Box action bounds, {what} has {part}")
            low += [float(x) for x in part.low]
            high += [float(x) for x in part.high]
        else:
            raise ConfigError(f"env=gym supports Discrete, MultiDiscrete, flat Box action spaces and Tuples of "
                              f"them, {what} has {space}")
    return dict(action_heads=tuple(heads), action_low=tuple(low), action_high=tuple(high))


def _to_env(space, spec: EnvSpec, clip):
    """What action_converter(spec) gives -> what the env's step() takes, or None where it is the
    same (one Discrete from 0, a Box). clip: the Box bounds to clip to (env.clip_actions), or None."""
    import gymnasium as gym
    if isinstance(space, gym.spaces.Discrete) and int(space.start) == 0 or isinstance(space, gym.spaces.Box):
        return None
    parts = list(space.spaces) if isinstance(space, gym.spaces.Tuple) else [space]
    heads = spec.num_heads

    def convert(action):
        if spec.continuous and heads:
            ints, floats = action
        elif spec.continuous:
            ints, floats = (), action
        else:
            ints, floats = np.atleast_1d(action), ()
        if clip is not None:
            floats = np.clip(floats, *clip)
        out, i, f = [], 0, 0
        for part in parts:
            if isinstance(part, gym.spaces.Discrete):
                out.append(int(ints[i]) + int(part.start))
                i += 1
            elif isinstance(part, gym.spaces.MultiDiscrete):
                n = len(part.nvec)
                out.append(np.asarray(ints[i : i + n], np.int64) + part.start)
                i += n
            else:
                n = part.shape[0]
                out.append(np.asarray(floats[f : f + n], np.float32))
                f += n
        return tuple(out) if isinstance(space, gym.spaces.Tuple) else out[0]

    return convert


class GymEnv:
    def __init__(self, env_cfg, seed: int):
        self.env = _make(env_cfg)
        self.spec = _spec_of(env_cfg, self.env)
        self.frameskip = env_cfg.frameskip
        self._seed = seed
        # a Box: the bounds the policy's unbounded samples are clipped to; None: Discrete
        self.bounds = None
        if self.spec.continuous and env_cfg.clip_actions:
            self.bounds = (np.array(self.spec.action_low, np.float32), np.array(self.spec.action_high, np.float32))
        # named keys: each observation packed into the buffers' pair; actions other than one
        # Discrete or one Box: rebuilt into the env's own space
        self.pack = observations.Packer(self.spec.keys) if self.spec.keys else None
        self.to_env = _to_env(self.env.action_space, self.spec, self.bounds)

    def reset(self):
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None  # seed the first episode only; later ones follow the env's own RNG
        return obs if self.pack is None else self.pack(obs)

    def step(self, action):
        """action: as action_converter(spec) gives it: an int (one Discrete) or a float32 array of
        spec.continuous values (a Box, clipped here unless env.clip_actions is false), else what
        to_env turns into the env's own action."""
        if self.to_env is not None:
            action = self.to_env(action)
        elif not self.spec.continuous:
            action = int(action)
        elif self.bounds is not None:
            action = np.clip(action, *self.bounds)
        total = 0.0
        for _ in range(self.frameskip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        done = terminated or truncated
        if not done:
            return (obs if self.pack is None else self.pack(obs)), total, False, NO_INFO
        out = TRUNCATED if truncated and not terminated else NO_INFO
        if "true_objective" in info:  # the env's own measure of the episode (nodes.envs's contract)
            out = {**out, "true_objective": float(info["true_objective"])}
        return None, total, True, out

    def render(self):
        """A frame for videos (launch.enjoy): the env's rgb_array render where it was made with one."""
        frame = self.env.render()
        if not (isinstance(frame, np.ndarray) and frame.ndim == 3):
            raise ValueError("this gymnasium env renders no rgb_array frame: make it with render_mode='rgb_array' "
                             "(+env.kwargs.render_mode=rgb_array)")
        return frame

    def close(self) -> None:
        self.env.close()


def make(env_cfg, seed: int) -> GymEnv:
    return GymEnv(env_cfg, seed)
