"""EnvPool's synchronous step against its asynchronous send/recv, as a rollout worker would use them:
one process pinned to one core, N envs in two groups of N/2 (double-buffered sampling), random
actions, no policy. Prints env steps/s of each way, and of the python backend's envs stepped one
by one, for one Atari game and one MuJoCo task.

    python benchmarks/envpool_api.py [--seconds 10] [--envs 8] [--core 0]

  sync:  one pool per group, pool.step(actions, env_id) per group in turn (what env.backend=envpool does)
  async: one pool of N envs, batch_size N/2: both groups sent, then recv one batch and send it
         back, so one group steps in the pool's thread while the other is handed over
  python: the python backend's envs (nodes/envs), env.step one env at a time
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {"atari": ("atari_pong", "Pong-v5"), "mujoco": ("mujoco_halfcheetah", "HalfCheetah-v5")}


def pool_kwargs(family: str, n: int, batch: int, threads: int) -> dict:
    kw = dict(env_type="gymnasium", num_envs=n, batch_size=batch, num_threads=threads, seed=0)
    if family == "atari":
        kw.update(stack_num=1, episodic_life=False, reward_clip=False, use_fire_reset=False, noop_max=30)
    return kw


def actions(space, n: int, rng) -> np.ndarray:
    if hasattr(space, "n"):
        return rng.integers(space.n, size=n).astype(np.int32)
    return rng.uniform(space.low, space.high, (n, space.shape[0])).astype(np.float32)


def sync_steps(family: str, task: str, n: int, seconds: float) -> float:
    import envpool
    half = n // 2
    pools = [envpool.make(task, **pool_kwargs(family, half, half, 1)) for _ in range(2)]
    ids = np.arange(half, dtype=np.int32)
    rng = np.random.default_rng(0)
    for p in pools:
        p.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for p in pools:
            p.step(actions(p.action_space, half, rng), ids)
            steps += half
    return steps / (time.perf_counter() - start)


def async_steps(family: str, task: str, n: int, seconds: float) -> float:
    import envpool
    half = n // 2
    pool = envpool.make(task, **pool_kwargs(family, n, half, 1))
    rng = np.random.default_rng(0)
    pool.async_reset()  # every env's reset is sent; recv returns them half at a time
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        *_, info = pool.recv()
        pool.send(actions(pool.action_space, half, rng), info["env_id"])
        steps += half
    return steps / (time.perf_counter() - start)


def python_steps(name: str, n: int, seconds: float) -> float:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import launch.cli.app  # noqa: F401 - registers the schema
    from nodes.envs import action_converter, make_env
    from nodes.sampling.rollout_worker import random_rows
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        env_cfg = OmegaConf.to_object(compose(config_name="config", overrides=[f"env={name}"])).env
    envs = [make_env(env_cfg, i) for i in range(n)]
    convert = action_converter(envs[0].spec)
    rng = np.random.default_rng(0)
    for env in envs:
        env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env, row in zip(envs, random_rows(envs[0].spec, rng, n)):
            obs, _, done, info = env.step(convert(row))
            if done and info.get("episode_end", True):
                env.reset()
        steps += n
    for env in envs:
        env.close()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--core", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    os.sched_setaffinity(0, {args.core})  # a rollout worker's pinning; the pools' threads inherit it
    for family, (name, task) in TASKS.items():
        sync = sync_steps(family, task, args.envs, args.seconds)
        asyn = async_steps(family, task, args.envs, args.seconds)
        py = python_steps(name, args.envs, args.seconds)
        print(f"{family} ({task}, {args.envs} envs, one core): sync {sync:,.0f} steps/s, "
              f"async {asyn:,.0f} steps/s (async/sync {asyn / sync:.2f}), python backend {py:,.0f} steps/s "
              f"(sync/python {sync / py:.2f})", flush=True)


if __name__ == "__main__":
    main()
