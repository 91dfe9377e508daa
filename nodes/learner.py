"""Learner: a background batcher thread plus the APPO gradient step.

The batcher copies finished trajectory slots into a batch (so rollout workers get the slots
back at once) while the previous batch is being trained on. The step is: BPTT unroll, V-trace
(or GAE) targets, PPO-clipped (or plain) policy loss + value loss - entropy bonus, backward,
then `sync_hook(model, num_samples)`, then gradient-norm clipping and Adam.

`sync_hook` is the seam for multi-node training: it receives the model with local gradients and
the local sample count, may replace the gradients by global ones in place, and returns the global
sample count. One node uses the identity. nodes/ never imports what supplies it.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Dict, Optional

import torch
from torch import nn

from nodes import losses
from nodes.buffers import SlotBatch

SyncHook = Callable[[nn.Module, int], int]


def identity_sync(model: nn.Module, num_samples: int) -> int:
    return num_samples


class Batcher(threading.Thread):
    """Collects `per_batch` finished slots from the trajectory queue into SlotBatch objects."""

    def __init__(self, buffers, channels, per_batch: int, stop: threading.Event):
        super().__init__(name="batcher", daemon=True)
        self.buffers, self.ch, self.per_batch, self.stop_event = buffers, channels, per_batch, stop
        self.out: "queue.Queue[SlotBatch]" = queue.Queue(maxsize=1)
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        pending = []
        try:
            while not self.stop_event.is_set():
                try:
                    pending += self.ch.trajectories.get_many(
                        timeout=0.1, max_messages_to_get=self.per_batch - len(pending))
                except queue.Empty:
                    continue
                if len(pending) < self.per_batch:
                    continue
                batch = SlotBatch(self.buffers, pending)
                self.ch.free_slots.put_many(pending)
                pending = []
                while not self.stop_event.is_set():
                    try:
                        self.out.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main loop
            self.error = exc

    def get(self, timeout: float) -> Optional[SlotBatch]:
        if self.error is not None:
            raise RuntimeError(f"batcher failed: {self.error!r}") from self.error
        try:
            return self.out.get(timeout=timeout)
        except queue.Empty:
            return None


class Learner:
    def __init__(self, model: nn.Module, algo_cfg, sync_hook: SyncHook = identity_sync):
        self.model, self.cfg, self.sync_hook = model, algo_cfg, sync_hook
        self.optimizer = torch.optim.Adam(model.parameters(), lr=algo_cfg.lr, eps=algo_cfg.adam_eps,
                                          betas=(algo_cfg.adam_beta1, algo_cfg.adam_beta2))
        self.version = 0  # number of optimizer steps taken
        self.device = next(model.parameters()).device

    def loss(self, batch) -> Dict[str, torch.Tensor]:
        c = self.cfg
        logits, values = self.model.unroll(batch.obs, batch.h0, batch.dones)
        logp_all = torch.log_softmax(logits[:, :-1], -1)
        logp = logp_all.gather(2, batch.actions.unsqueeze(2)).squeeze(2)
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
        if c.ppo_clip:
            policy_loss = losses.ppo_surrogate(ratio, adv, c.clip_ratio)
        else:
            policy_loss = -(logp * adv).mean()
        value_loss = 0.5 * (targets - values[:, :-1]).pow(2).mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        total = policy_loss + c.value_loss_coeff * value_loss - c.entropy_coeff * entropy
        return dict(loss=total, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                    ratio_dev=(ratio - 1).abs().mean())

    def train_step(self, batch) -> Dict[str, float]:
        t0 = time.perf_counter()
        batch = batch.to(self.device)
        lag = (self.version - batch.versions).float()
        parts = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=False)
        parts["loss"].backward()
        t_sync = time.perf_counter()
        global_samples = self.sync_hook(self.model, batch.num_samples)
        t_sync = time.perf_counter() - t_sync
        grad_norm = (nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
                     if self.cfg.max_grad_norm > 0 else torch.tensor(0.0))
        self.optimizer.step()
        # Observation statistics change the policy too, so they move with the version: updated
        # after the loss, the learner's policy at loss time is exactly the published one.
        self.model.obs_norm.update(batch.obs[:, :-1])
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
