"""Action heads: the action distribution read from one tensor of action parameters.

Multi-head actions (a tuple of discrete heads) are L independent categorical heads over one
output; continuous actions (a Box) are Gaussian: D means from the same output, a learned
state-independent log-std per dim. The policy worker samples from it and the learner scores the
same actions with it, so both read the parameters through this one layout.
"""
from __future__ import annotations

import math

import torch


class ActionHeads:
    """Discrete heads and continuous (Gaussian) dims, read from one tensor of action parameters.

    Layout along the last axis: the logits of each discrete head, then the D means, then the D
    log-stds (the model appends its state-independent log-std parameter: ActorCritic). A step's
    action is one float32 entry per discrete head (its index, exact in float32) then one per
    continuous dim (an unbounded sample: the env wrapper clips it to the bounds, and the log-prob
    stays that of the unclipped sample, as in Sample Factory and CleanRL). The joint
    log-probability and entropy are sums over heads and dims, so the learner never needs to know
    how many there are or of which kind.
    """

    def __init__(self, sizes, continuous: int = 0):
        self.sizes = [int(n) for n in sizes]
        self.continuous = int(continuous)
        self.num_logits = sum(self.sizes)
        self.width = self.num_logits + 2 * self.continuous  # of the action parameters

    def split(self, params: torch.Tensor):
        """Each discrete head's log-probabilities (none when there are no discrete heads)."""
        logits = params[..., : self.num_logits] if self.continuous else params
        return [torch.log_softmax(x, -1) for x in logits.split(self.sizes, -1)] if self.sizes else []

    def gaussian(self, params: torch.Tensor):
        """(means, log-stds) of the continuous dims."""
        n, d = self.num_logits, self.continuous
        return params[..., n : n + d], params[..., n + d :]

    def sample(self, params: torch.Tensor, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """One action per head and dim: [..., heads + dims] float32 (any batch shape). uniforms: the
        U(0,1) draws to use, [..., sum(sizes) + dims] (sampler.mode=deterministic: drawn per env
        from the env's own stream); None: torch's generator of this process. A discrete head takes
        the Gumbel-max of its logits; a continuous dim mean + std * z with z = ndtri(u), the
        inverse normal CDF, so one uniform per dim decides it."""
        n = self.num_logits
        u_logits = z = None
        if self.sizes:
            if uniforms is None:  # head by head: the draws torch's generator gave before `draw` existed
                u_logits = torch.cat([torch.rand_like(params[..., :k]) for k in self.sizes], -1)
            else:
                u_logits = uniforms[..., :n]
        if self.continuous:
            if uniforms is None:
                z = torch.randn_like(params[..., n : n + self.continuous])
            else:  # ndtri(0) and ndtri(1) are infinite
                z = torch.special.ndtri(uniforms[..., n:].to(params.dtype).clamp(1e-6, 1.0 - 1e-6))
        return self.draw(params, u_logits, z)

    def draw(self, params: torch.Tensor, uniforms: torch.Tensor | None, normals: torch.Tensor | None) -> torch.Tensor:
        """`sample` given its noise: U(0,1) draws per logit for the discrete heads (None without
        them) and standard normal draws per continuous dim (None without them). An exported policy
        (nodes.models.deploy) takes these two as inputs, so it needs no random generator."""
        out = []
        if self.sizes:
            out.append(self._gumbel_max(self.split(params), uniforms).to(torch.float32))
        if self.continuous:
            mean, log_std = self.gaussian(params)
            out.append(mean + log_std.exp() * normals.to(mean.dtype))
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def _gumbel_max(self, split, uniforms: torch.Tensor) -> torch.Tensor:
        """[..., heads] int64: each discrete head's Gumbel-max sample."""
        out = []
        for logp, u in zip(split, uniforms.split(self.sizes, -1)):
            u = u.to(logp.dtype).clamp(1e-10, 1.0)
            out.append((logp - torch.log(-torch.log(u))).argmax(-1))
        return torch.stack(out, -1)

    def greedy(self, params: torch.Tensor) -> torch.Tensor:
        """Each discrete head's most likely action and each continuous dim's mean."""
        out = []
        if self.sizes:
            out.append(torch.stack([logp.argmax(-1) for logp in self.split(params)], -1).to(torch.float32))
        if self.continuous:
            out.append(self.gaussian(params)[0])
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.log_prob_and_entropy(params, actions)[0]

    def log_prob_and_entropy(self, params: torch.Tensor, actions: torch.Tensor):
        """Both from one log-softmax per discrete head (the learner needs both)."""
        logp, entropy = [], []
        if self.sizes:
            split = self.split(params)
            logp.append(self._log_prob(split, actions))
            entropy.append(self._entropy(split))
        if self.continuous:
            mean, log_std = self.gaussian(params)
            logp.append(_gaussian_log_prob(mean, log_std, actions[..., len(self.sizes) :]))
            entropy.append(_gaussian_entropy(log_std))
        if len(logp) == 1:
            return logp[0], entropy[0]
        return logp[0] + logp[1], entropy[0] + entropy[1]

    @staticmethod
    def _log_prob(split, actions: torch.Tensor) -> torch.Tensor:
        # actions are float32 in the buffers: indices go back to int64 for gather (a no-op on int64)
        parts = [logp.gather(-1, actions[..., i : i + 1].long()).squeeze(-1) for i, logp in enumerate(split)]
        return torch.stack(parts, 0).sum(0)

    @staticmethod
    def _entropy(split) -> torch.Tensor:
        return torch.stack([-(logp.exp() * logp).sum(-1) for logp in split], 0).sum(0)


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Summed over dims: the Normal log-density, written with the log-std (torch.distributions.Normal's
    formula with var = exp(2 log std); equal to float rounding)."""
    var = (2 * log_std).exp()
    return (-((actions - mean) ** 2) / (2 * var) - log_std - _HALF_LOG_2PI).sum(-1)


def _gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Summed over dims: each Normal's entropy, 1/2 + 1/2 log(2 pi) + log std."""
    return (0.5 + _HALF_LOG_2PI + log_std).sum(-1)
