"""Play whole episodes with a policy (or uniformly random actions) in this process.

Used by launch.enjoy. One env, batch of one, the same model code the policy workers run, so what
is watched is what was trained. The logged score is the unscaled game reward, summed over the
whole game (an Atari life lost is not the end of the episode here either).

A match between agents (env.agents > 1) is played by the policy in every seat (or by one
population member per seat), each agent with its own recurrent state; the scores, match results
and frames are the first agent's.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from nodes.envs import action_converter, env_spec, make_envs


def play(cfg, models, episodes: int, seed: int, greedy: bool = False,
         max_steps: int = 100_000, on_frame: Callable[[int, object], None] | None = None,
         matches: list | None = None, objectives: list | None = None):
    """Returns (scores, lengths) of `episodes` episodes. models: the policy of each seat (one
    model, or a list with one per agent of a match: a population's members against each other);
    None plays uniformly random actions.

    on_frame(episode, env) is called after reset and after every step (videos render from it).
    matches: a list that receives each finished VizDoom match's result (frags, deaths, place, ...).
    objectives: a list that receives each episode's true objective (info["true_objective"] at its
    end, else its score: nodes.envs).
    """
    spec = env_spec(cfg.env)
    envs = make_envs(cfg.env, cfg.env.agents, lambda i: seed)  # one env, or the seats of one match
    seats = list(models) if isinstance(models, (list, tuple)) else [models] * len(envs)
    env = envs[0]  # the one scored and filmed
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    scores: list[float] = []
    lengths: list[int] = []
    try:
        for ep in range(episodes):
            obs = [e.reset() for e in envs]
            states = [torch.zeros(1, m.state_size) if m is not None else None for m in seats]
            score, length, done, objective = 0.0, 0, False, 0.0
            if on_frame:
                on_frame(ep, env)
            while length < max_steps:
                actions = [_choose(seats[j], spec, obs, states, j, greedy, rng) for j in range(len(envs))]
                outs = _step_seats(envs, actions)
                obs = [o[0] for o in outs]
                _, reward, done, info = outs[0]
                score += reward
                length += 1
                if on_frame and obs[0] is not None:
                    on_frame(ep, env)
                if done:
                    objective = info.get("true_objective", score)
                    if matches is not None and "match" in info:
                        matches.append(info["match"])
                    if info.get("episode_end", True):
                        break
                    states = [None if st is None else st.zero_() for st in states]  # a lost life: as in training
            scores.append(score)
            lengths.append(length)
            if objectives is not None:
                objectives.append(objective if done else score)  # cut at max_steps: its score so far
    finally:
        for e in envs:
            e.close()
    return scores, lengths


def _choose(model, spec, obs, states, j, greedy, rng):
    """Seat j's action (its recurrent state updated in place in `states`)."""
    action = _act(model, spec, obs[j], states[j], greedy, rng)
    if model is None:
        return action
    action, states[j] = action
    return action


def _step_seats(envs, actions) -> list:
    """Step every env with its action: [(obs, reward, done, info)]; the seats of a match between
    agents submit their actions first (the last submit steps the match)."""
    if hasattr(envs[0], "submit"):
        for e, action in zip(envs, actions):
            e.submit(action)
    return [e.step(action) for e, action in zip(envs, actions)]


def _act(model, spec, obs, state, greedy, rng):
    """greedy: each discrete head's most likely action, each continuous dim's mean."""
    if model is None:
        return _random_action(spec, rng)
    pixels, meas = obs if spec.meas_size else (obs, np.zeros(0, np.float32))
    with torch.inference_mode():
        params, _, state = model.step(torch.as_tensor(np.asarray(pixels))[None],
                                      torch.as_tensor(np.asarray(meas, np.float32))[None], state)
        row = (model.heads.greedy(params) if greedy else model.heads.sample(params))[0].numpy()
    return action_converter(spec)(row), state


def _random_action(spec, rng):
    """Uniform: over each discrete head's actions, and between each continuous dim's bounds."""
    a = [int(rng.integers(n)) for n in spec.action_heads]
    if spec.continuous:
        dims = rng.uniform(spec.action_low, spec.action_high).astype(np.float32)
        return dims if not a else (np.array(a, np.int64), dims)
    return a[0] if len(a) == 1 else a
