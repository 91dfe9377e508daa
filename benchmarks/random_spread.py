"""A random Gaussian policy on a gymnasium MuJoCo task, at several stds: the mean episode, its return
and the control cost a step (the reward info's `reward_ctrl`), actions N(0, std^2) clipped to the
bounds as the env wrapper clips the policy's samples (nodes/envs/gym_env.py). It shows where the
initial spread (model.action_std) makes staying alive cost more than it pays (Ant-v5 at std 1).
Usage: python benchmarks/random_spread.py [ENV_ID] [EPISODES]   (default Ant-v5 8)"""
import sys

import gymnasium as gym
import numpy as np


def main(env_id: str = "Ant-v5", episodes: int = 8) -> None:
    env = gym.make(env_id)
    low, high = env.action_space.low, env.action_space.high
    print("| std | mean episode (steps) | return | control cost a step |")
    print("| --- | --- | --- | --- |")
    for std in (1.0, 0.7, 0.5, 0.3, 0.1):
        rng = np.random.default_rng(0)
        lengths, returns, ctrl = [], [], []
        for episode in range(episodes):
            env.reset(seed=episode)
            done, total, steps, cost = False, 0.0, 0, 0.0
            while not done:
                action = np.clip(std * rng.standard_normal(env.action_space.shape), low, high)
                _, reward, terminated, truncated, info = env.step(action)
                total, steps, cost = total + reward, steps + 1, cost + info.get("reward_ctrl", 0.0)
                done = terminated or truncated
            lengths.append(steps), returns.append(total), ctrl.append(cost / steps)
        print(f"| {std} | {np.mean(lengths):,.0f} | {np.mean(returns):.0f} | {np.mean(ctrl):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "Ant-v5", int(sys.argv[2]) if len(sys.argv) > 2 else 8)
