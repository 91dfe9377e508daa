"""Your own environment: a gymnasium env written here, trained through the Python API.

    python examples/own_env.py                          # trains Catch for 200k frames (~1 min on 2 cores)
    python examples/own_env.py train.max_env_frames=1e6 sampler.num_workers=4   # the command line's overrides

Catch (bsuite's): a ball falls down a 10x5 screen, the paddle on the bottom row moves left, stays
or moves right; +1 for a catch, -1 for a miss, one ball per episode. Its observation is a Dict of
an image (the screen, HxW uint8) and a categorical (the paddle's column), the shape of most envs of
one's own: each key gets its own encoder (the screen, too small for the conv stack, an MLP).

Copy this file and change the env: any gymnasium.Env works (docs/your-environment.md). The
function the run makes envs with (make_catch) is named by this file, and every worker imports
this file as a module to find it: whatever trains must stay under `if __name__ == "__main__":`.
Bad input is refused in one line with exit code 2, as on the command line (api.command_line_refusals).
"""
import sys

import gymnasium as gym
import numpy as np

ROWS, COLS = 10, 5


class Catch(gym.Env):
    observation_space = gym.spaces.Dict({
        "screen": gym.spaces.Box(0, 255, (ROWS, COLS), np.uint8),  # HxW: one grey channel
        "paddle": gym.spaces.Discrete(COLS),
    })
    action_space = gym.spaces.Discrete(3)  # left, stay, right

    def __init__(self, rows: int = ROWS):
        self.rows = rows

    def _observe(self):
        screen = np.zeros((ROWS, COLS), np.uint8)
        screen[self.ball_row, self.ball_col] = 255
        screen[ROWS - 1, self.paddle] = 128
        return {"screen": screen, "paddle": self.paddle}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball_row, self.ball_col = 0, int(self.np_random.integers(COLS))
        self.paddle = int(self.np_random.integers(COLS))
        return self._observe(), {}

    def step(self, action):
        self.paddle = min(max(self.paddle + int(action) - 1, 0), COLS - 1)
        self.ball_row += 1
        if self.ball_row < ROWS - 1:
            return self._observe(), 0.0, False, False, {}
        reward = 1.0 if self.paddle == self.ball_col else -1.0
        return self._observe(), reward, True, False, {}


def make_catch(rows: int = ROWS) -> gym.Env:
    """What env.make names: called in every worker with env.kwargs (here none)."""
    return Catch(rows)


if __name__ == "__main__":
    from launch import api

    with api.command_line_refusals():  # bad input: one line and exit code 2, as on the command line
        cfg = api.config("env=gym", "train.max_env_frames=200000", "sampler.num_workers=2",
                         "sampler.envs_per_worker=8", *sys.argv[1:], env_make=make_catch)
        summary = api.train(cfg, run_dir="runs/catch")
    print(f"trained {summary['env_frames']:,} frames: mean episode reward {summary['mean_episode_reward']:.2f} "
          "(a random paddle: about -0.6, a perfect one: 1)")
    result = api.evaluate("runs/catch", episodes=20)
    print(f"evaluated: {result['reward_mean']:.2f} over {result['episodes']} episodes")
