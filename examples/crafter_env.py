"""Crafter (Hafner 2021) through env.make: an env with the old gym API made a gymnasium one.

    pip install crafter
    PYTHONPATH=examples python -m launch.train env=gym env.make=crafter_env:make_crafter \\
        +env.kwargs.stats_dir=runs/crafter/stats train.max_env_frames=1000000 hydra.run.dir=runs/crafter
    python benchmarks/crafter_score.py runs/crafter/stats/stats.jsonl   # the paper's score

Crafter's Env returns obs from reset() and (obs, reward, done, info) from step(); gymnasium's
API wants (obs, info) and (obs, reward, terminated, truncated, info). Its episode ends at death
(info["discount"] == 0: terminated) or after 10,000 steps (truncated: the learner bootstraps
there). With stats_dir, crafter's own recorder appends each finished episode's achievements to
stats_dir/stats.jsonl, the file the paper's score is computed from (every training episode:
give stats_dir to training only, not to evaluation or launch.enjoy).
"""
import crafter
import gymnasium as gym
import numpy as np


class Crafter(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(17)
    metadata = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, env):
        self.env = env
        self.last = None

    def reset(self, *, seed=None, options=None):
        self.last = self.env.reset()
        return self.last, {}

    def step(self, action):
        self.last, reward, done, info = self.env.step(int(action))
        dead = done and info["discount"] == 0
        return self.last, float(reward), dead, done and not dead, info

    def render(self):
        return self.last  # the agent's own 64x64 view (launch.enjoy enjoy.video=true)


def make_crafter(stats_dir: str = "") -> gym.Env:
    env = crafter.Env()
    if stats_dir:
        env = crafter.Recorder(env, stats_dir, save_stats=True, save_video=False, save_episode=False)
    return Crafter(env)
