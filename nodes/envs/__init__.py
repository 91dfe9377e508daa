"""Env registry: the one place that maps `env.family` to a wrapper.

Every wrapper has the same small interface, used by the rollout workers and launch.enjoy:
    spec                      EnvSpec (observation shape/dtype, action heads and dims, measurements)
    reset() -> obs            numpy array of spec.obs_shape / spec.obs_dtype; for an env with
                              measurements (spec.meas_size > 0) a pair (pixels, float32 vector);
                              an env of named keys (spec.keys) packs them into that
                              (nodes.envs.observations.Packer)
    step(action) -> (obs, reward, done, info)
        action   what `action_converter(spec)` makes of the policy's row: an int for one discrete
                 head, an int64 array (one per head) for several; for continuous dims (a Box) a
                 float32 array of spec.continuous unbounded values, clipped to the bounds by the
                 wrapper; a (discrete int64 array, continuous float32 array) pair for both
        reward   the unscaled game reward (what is logged as the episode score)
        done     the trajectory ends here for training (no bootstrap across it)
        info     NO_INFO, or a dict that may hold
                   "train_reward": reward used for training before env.reward_scale
                                   (shaped or clipped); default: reward
                   "episode_end":  False when `done` is not the end of the game (an Atari
                                   life lost): the score keeps adding up, no reset() follows
                                   and obs is the next observation; default: done
                   "true_objective": at an episode's last step, the game's own measure of the
                                   episode when it is not the summed reward (tics survived,
                                   kills); default: the episode's summed reward
                   "truncated":    True when `done` came from a time limit, not from the task
                                   (gymnasium's truncated): the learner may bootstrap from the
                                   value there (algo.value_bootstrap); default: False
        obs      None when the episode is over (the caller calls reset())
    render() -> HxWx3 uint8   optional: a frame for videos (launch.enjoy)
    close()

An agent of a match between agents (env.agents > 1, nodes/envs/doom_agents.py) is an env too,
with one more call: submit(action) on every agent of the match first, then step(action) on each
(the last submit steps the whole match in lock-step). Its info may hold "aborted": True (the
match's engines failed and the match was restarted: done, but not a finished episode) and
"restart": the reason, on the match's first agent.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodes.errors import ConfigError
from nodes.janitor import workdir_name


@dataclass(frozen=True)
class EnvSpec:
    obs_shape: tuple[int, ...]
    obs_dtype: Any  # numpy dtype: uint8 for pixels, float32 for vectors
    action_heads: tuple[int, ...]  # one discrete head per entry, its number of actions
    meas_size: int = 0  # length of the measurements vector (game variables); 0 = none
    # Continuous action dims (a Box action space), after the discrete heads: their bounds, one
    # entry per dim (() = none). The policy samples unbounded values; the wrapper clips to these,
    # and random actions are uniform between them.
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    # Named observation keys (nodes.envs.observations.ObsKey) stored in the obs/meas pair: a gymnasium
    # Dict, image, categorical or array observation. () = the plain pair (pixels or one vector, and
    # VizDoom's game variables), read by the model's own encoder and measurements MLP
    keys: tuple = ()

    @property
    def num_heads(self) -> int:
        """Discrete heads."""
        return len(self.action_heads)

    @property
    def continuous(self) -> int:
        """Continuous action dims."""
        return len(self.action_low)

    @property
    def action_width(self) -> int:
        """Entries of one step's action in the buffers: one per discrete head, one per continuous dim."""
        return self.num_heads + self.continuous

    @property
    def uniform_width(self) -> int:
        """U(0,1) draws that decide one step's action (sampler.mode=deterministic): one per action of
        each discrete head (Gumbel-max), one per continuous dim (inverse normal CDF)."""
        return sum(self.action_heads) + self.continuous

    @property
    def is_image(self) -> bool:
        return len(self.obs_shape) == 3


def action_converter(spec: EnvSpec) -> Callable[[np.ndarray], Any]:
    """row (one step's action as the buffers hold it: float32, discrete heads then continuous dims)
    -> what the env's step() takes (the interface above). Discrete actions are small integers,
    exact in float32."""
    heads = spec.num_heads
    if not spec.continuous:
        if heads == 1:
            return lambda row: int(row[0])
        return lambda row: np.asarray(row).astype(np.int64)
    if not heads:
        return lambda row: np.array(row, dtype=np.float32)  # a copy: the row is shared memory
    return lambda row: (np.asarray(row[:heads]).astype(np.int64), np.array(row[heads:], dtype=np.float32))


NO_INFO: dict = {}  # shared, never mutated: most steps carry no extra information

FAMILIES = ("doom", "gym", "dmlab", "atari")


def _module(family: str):
    if family == "doom":
        from nodes.envs import doom
        return doom
    if family == "gym":
        from nodes.envs import gym_env
        return gym_env
    if family == "dmlab":
        from nodes.envs import dmlab
        return dmlab
    if family == "atari":
        from nodes.envs import atari
        return atari
    raise ConfigError(f"unknown env.family '{family}' (available: {', '.join(FAMILIES)})")


def check_env_config(env_cfg) -> EnvSpec:
    """Raise ConfigError (one line) if this env cannot be created here; else its spec. Starts no
    engine (a gymnasium env is made, reset once and closed: nodes.envs.gym_env.check)."""
    spec = _module(env_cfg.family).check(env_cfg)
    if env_cfg.backend == "envpool":
        from nodes.envs import envpool_env
        envpool_env.check(env_cfg)
    return spec if spec is not None else env_spec(env_cfg)


def env_spec(env_cfg) -> EnvSpec:
    """Observation/action spec without starting an engine process."""
    return _module(env_cfg.family).spec(env_cfg)


def make_env(env_cfg, seed: int):
    return _module(env_cfg.family).make(env_cfg, seed)


def make_envs(env_cfg, count: int, seed_of, groups: list[list[int]] | None = None) -> list:
    """`count` env slots; slot i's seed is seed_of(i). With env.agents > 1 a match fills
    env.agents consecutive slots (seeded by its first slot's seed). groups: a rollout worker's env
    groups (slot indexes stepped together): with env.backend=envpool each is one EnvPool batch;
    without them (evaluation, enjoy) the envs are the python backend's."""
    if groups is not None and env_cfg.backend == "envpool":
        from nodes.envs import envpool_env
        return envpool_env.make_slots(env_cfg, env_spec(env_cfg), groups, seed_of)
    if env_cfg.agents == 1:
        return [make_env(env_cfg, seed_of(i)) for i in range(count)]
    from nodes.envs import doom_agents
    envs: list = []
    try:
        for i in range(0, count, env_cfg.agents):
            envs += doom_agents.AgentMatch(env_cfg, seed_of(i)).slots
    except BaseException:
        for env in envs:
            env.close()
        raise
    return envs


# The env families whose engines write files of their own into the working directory: VizDoom
# writes _vizdoom/ and _vizdoom.ini there, and instances starting at once in one directory race.
# A process that runs them works in a directory of its own (env_workdir); every other env works
# in the directory the run was launched from, where a relative path the user gives (env.kwargs:
# crafter's stats_dir, RecordVideo's folder) points. Another such engine joins this list.
OWN_WORKDIR_FAMILIES = ("doom",)


def workdir_path(run_dir: str, name: str, pid: int) -> str:
    """The working directory of this host's process `pid` (env_workdir): a process killed in it
    never removes it, its parent (or the node's janitor: nodes/janitor.py, by this name) does."""
    return os.path.join(run_dir, ".workers", workdir_name(name, pid))


@contextlib.contextmanager
def env_workdir(env_cfg, run_dir: str, name: str) -> Iterator[None]:
    """Run the block, which makes and steps env_cfg's envs, in the working directory they need.

    An engine of OWN_WORKDIR_FAMILIES gets a directory of its own under run_dir/.workers/, named by
    `name`, host and pid (several ranks, and nodes on several hosts, share the run directory),
    removed after. Any other env stays where the process is: the directory the run was launched
    from (workers start in their node's; Hydra's hydra.job.chdir is false)."""
    if env_cfg.family not in OWN_WORKDIR_FAMILIES:
        yield
        return
    path = workdir_path(run_dir, name, os.getpid())
    os.makedirs(path, exist_ok=True)
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)
        shutil.rmtree(path, ignore_errors=True)
