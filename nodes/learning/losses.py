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


def mean(x, mask=None):
    """The mean of x, over the steps `mask` [B, T] keeps (None: all of them)."""
    if mask is None:
        return x.mean()
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def kl_to_behaviour(log_ratio):
    """Per sample: an estimate of KL(behaviour || current) from the behaviour policy's own samples,
    (r - 1) - log r with r = p_current / p_behaviour (Schulman's k3: unbiased, never negative, and
    its gradient's mean is the KL's). It needs only the stored log-prob of the action taken, so it
    works for every action space (Sample Factory computes the exact KL from stored action
    parameters instead)."""
    return torch.expm1(log_ratio) - log_ratio


def ppo_surrogate(ratio, adv, clip_ratio: float, mask=None):
    """Negative PPO clipped objective (a loss), averaged (over `mask`'s steps)."""
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    return -mean(torch.min(unclipped, clipped), mask)


def value_loss(values, targets, old_values, clip: float, mask=None):
    """0.5 x mean squared error of the values; with clip > 0, PPO's clipped value loss: the larger
    of the plain error and the error of the value kept within `clip` of the behaviour value, so a
    step cannot move a value far from where the data was collected (Sample Factory's VizDoom
    runs use 0.2)."""
    loss = (targets - values).pow(2)
    if clip > 0:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        loss = torch.max(loss, (targets - clipped).pow(2))
    return 0.5 * mean(loss, mask)


def symmetric_kl_to_uniform(split_logp):
    """Per sample, summed over discrete action heads: half the symmetric KL divergence to the uniform policy U,
    0.5 (KL(pi || U) + KL(U || pi)) = 0.5 (sum pi log pi - mean log pi) for each head's log-probs (the
    log n terms cancel): Sample Factory 2's `symmetric_kl_with_uniform_prior`. Zero exactly at the
    uniform policy; unlike the entropy bonus it grows without bound as a head gives an action no
    chance, and its gradient pushes hardest on those dead actions (no floor on the log-probs: a
    floor zeroes exactly that gradient). The batch mean is bounded by `exploration_term`.

    Continuous (Gaussian) dims add nothing: the real line has no uniform distribution to be
    near (no KL to it is finite), and a Gaussian's spread is its learned log-std, which the policy
    gradient moves (algo.exploration_loss=entropy adds a bonus on it instead)."""
    parts = [(logp.exp() * logp).sum(-1) - logp.mean(-1) for logp in split_logp]
    return 0.5 * torch.stack(parts, 0).sum(0)


KL_CAP = 30.0  # Sample Factory's bound on the exploration term's batch mean


def exploration_term(kl_mean):
    """The symmetric-KL exploration term of a batch, as Sample Factory bounds it: the mean over the
    batch capped at KL_CAP (no gradient beyond it), zero where it is not finite (a `where`, not a
    test: no host sync in the learner's step)."""
    return torch.where(torch.isfinite(kl_mean), torch.clamp(kl_mean, max=KL_CAP), torch.zeros_like(kl_mean))
