"""APPO loss pieces: V-trace targets, GAE, PPO clipped surrogate. Pure functions on [B, T] tensors.

Conventions: `dones[:, t]` is true when the episode ended with step t, so the value of the
observation after it must not be bootstrapped. `values` has T+1 columns (the last one is the
bootstrap value of the observation after the rollout).
"""
from __future__ import annotations

import torch


def vtrace(rewards, values, dones, log_rhos, gamma: float, rho_bar: float = 1.0, c_bar: float = 1.0):
    """V-trace (Espeholt et al. 2018, eq. 1). Returns (vs [B, T], pg_advantages [B, T]).

    vs_t = V(x_t) + sum_{s>=t} gamma^{s-t} (prod_{i=t}^{s-1} c_i) rho_s delta_s,
    delta_s = r_s + gamma V(x_{s+1}) - V(x_s); the policy-gradient advantage is
    rho_t (r_t + gamma vs_{t+1} - V(x_t)).
    """
    with torch.no_grad():
        rhos = torch.exp(log_rhos)
        clipped_rho = torch.clamp(rhos, max=rho_bar)
        cs = torch.clamp(rhos, max=c_bar)
        discounts = gamma * (1.0 - dones.float())
        v_t, v_next = values[:, :-1], values[:, 1:]
        deltas = clipped_rho * (rewards + discounts * v_next - v_t)
        acc = torch.zeros_like(values[:, -1])
        vs_minus_v = torch.empty_like(rewards)
        for t in reversed(range(rewards.shape[1])):
            acc = deltas[:, t] + discounts[:, t] * cs[:, t] * acc
            vs_minus_v[:, t] = acc
        vs = vs_minus_v + v_t
        vs_next = torch.cat([vs[:, 1:], values[:, -1:]], 1)
        adv = clipped_rho * (rewards + discounts * vs_next - v_t)
    return vs, adv


def gae(rewards, values, dones, gamma: float, lam: float):
    """Generalized advantage estimation. Returns (returns [B, T], advantages [B, T])."""
    with torch.no_grad():
        discounts = gamma * (1.0 - dones.float())
        deltas = rewards + discounts * values[:, 1:] - values[:, :-1]
        acc = torch.zeros_like(values[:, -1])
        adv = torch.empty_like(rewards)
        for t in reversed(range(rewards.shape[1])):
            acc = deltas[:, t] + discounts[:, t] * lam * acc
            adv[:, t] = acc
    return adv + values[:, :-1], adv


def ppo_surrogate(ratio, adv, clip_ratio: float):
    """Negative PPO clipped objective (a loss), averaged."""
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    return -torch.min(unclipped, clipped).mean()
