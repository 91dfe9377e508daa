"""Learner: the APPO gradient step on a batch from nodes.batcher.

The step: BPTT unroll, V-trace (or GAE) targets, PPO-clipped (or plain) policy loss + value loss
- entropy bonus, backward, `peers.reduce_gradients` (the sample-weighted mean over nodes; the
identity for one node), gradient-norm clipping, Adam, then the observation statistics (their
moments summed over nodes). nodes/ never imports what implements `peers`.
"""
from __future__ import annotations

import time

import torch
from torch import nn

from nodes import losses
from nodes.peers import Solo


class Learner:
    def __init__(self, model: nn.Module, algo_cfg, peers=None):
        self.model, self.cfg = model, algo_cfg
        self.peers = peers or Solo()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=algo_cfg.lr, eps=algo_cfg.adam_eps,
                                          betas=(algo_cfg.adam_beta1, algo_cfg.adam_beta2))
        self.version = 0  # number of optimizer steps taken
        self.device = next(model.parameters()).device

    def loss(self, batch) -> dict[str, torch.Tensor]:
        c = self.cfg
        logits, values = self.model.unroll(batch.obs, batch.meas, batch.h0, batch.dones)
        # summed over action heads; one log-softmax per head serves both
        logp, entropy = self.model.heads.log_prob_and_entropy(logits[:, :-1], batch.actions)
        log_ratio = logp - batch.logp
        ratio = torch.exp(log_ratio)
        if c.vtrace:
            targets, adv = losses.vtrace(batch.rewards, values.detach(), batch.dones, log_ratio.detach(),
                                         c.gamma, c.vtrace_rho, c.vtrace_c)
        else:
            behaviour_values = torch.cat([batch.values, values[:, -1:].detach()], 1)
            targets, adv = losses.gae(batch.rewards, behaviour_values, batch.dones, c.gamma, c.gae_lambda)
        if c.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = losses.ppo_surrogate(ratio, adv, c.clip_ratio) if c.ppo_clip else -(logp * adv).mean()
        value_loss = 0.5 * (targets - values[:, :-1]).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + c.value_loss_coeff * value_loss - c.entropy_coeff * entropy
        return dict(loss=total, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                    ratio_dev=(ratio - 1).abs().mean())

    def train_step(self, batch) -> dict[str, float]:
        t0 = time.perf_counter()
        batch = batch.to(self.device)
        lag = (self.version - batch.versions).float()
        parts = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=False)
        parts["loss"].backward()
        t_sync = time.perf_counter()
        global_samples = self.peers.reduce_gradients(self.model, batch.num_samples)
        t_sync = time.perf_counter() - t_sync
        grad_norm = (nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
                     if self.cfg.max_grad_norm > 0 else torch.tensor(0.0))
        self.optimizer.step()
        # Observation statistics change the policy too, so they move with the version: updated
        # after the loss, the learner's policy at loss time is exactly the published one.
        self.model.update_norms(batch.obs[:, :-1], batch.meas[:, :-1], self.peers.all_sum)
        self.version += 1
        stats = {k: float(v.detach()) for k, v in parts.items()}
        stats.update(grad_norm=float(grad_norm), policy_lag_mean=float(lag.mean()),
                     policy_lag_max=float(lag.max()), global_samples=global_samples,
                     sync_s=t_sync, step_s=time.perf_counter() - t0)
        return stats

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "policy_version": self.version}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["policy_version"])
