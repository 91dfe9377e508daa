"""Learner: a background batcher thread plus the APPO gradient step.

The batcher collects finished trajectory slots and copies a full batch out ahead of time (so
rollout workers get the slots back at once and the copy overlaps the previous step). It can also
hand over a partial batch on request: that is how a node that is behind its peers contributes
the samples it has instead of stalling them (see nodes.peers).

The step: BPTT unroll, V-trace (or GAE) targets, PPO-clipped (or plain) policy loss + value loss
- entropy bonus, backward, `peers.reduce_gradients` (the sample-weighted mean over nodes; the
identity for one node), gradient-norm clipping, Adam, then the observation statistics (their
moments summed over nodes). nodes/ never imports what implements `peers`.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

import torch
from torch import nn

from nodes import losses
from nodes.buffers import SlotBatch
from nodes.peers import Solo


class Batcher(threading.Thread):
    def __init__(self, buffers, channels, per_batch: int, stop: threading.Event):
        super().__init__(name="batcher", daemon=True)
        self.buffers, self.ch, self.per_batch, self.stop_event = buffers, channels, per_batch, stop
        self.cond = threading.Condition()
        self.pending: List[int] = []  # finished slots not yet in a batch
        self.ready: Optional[SlotBatch] = None  # a full batch copied out ahead of time
        self.error: Optional[BaseException] = None

    def _cut(self, n: int) -> SlotBatch:
        slots, self.pending = self.pending[:n], self.pending[n:]
        batch = SlotBatch.copy_slots(self.buffers, slots)
        self.ch.free_slots.put_many(slots)
        return batch

    def run(self) -> None:
        import queue
        try:
            while not self.stop_event.is_set():
                try:
                    got = self.ch.trajectories.get_many(timeout=0.05)
                except queue.Empty:
                    got = []
                with self.cond:
                    self.pending += got
                    if self.ready is None and len(self.pending) >= self.per_batch:
                        self.ready = self._cut(self.per_batch)
                        self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main loop
            self.error = exc

    def _check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"batcher failed: {self.error!r}") from self.error

    def get_full(self, timeout: float) -> Optional[SlotBatch]:
        self._check()
        with self.cond:
            if self.ready is None:
                self.cond.wait(timeout)
            batch, self.ready = self.ready, None
        return batch

    def take_partial(self, min_slots: int) -> Optional[SlotBatch]:
        """A full batch if there is one, else every pending slot if there are at least min_slots."""
        self._check()
        with self.cond:
            if self.ready is not None:
                batch, self.ready = self.ready, None
                return batch
            if len(self.pending) >= max(min_slots, 1):
                return self._cut(min(len(self.pending), self.per_batch))
        return None


class Learner:
    def __init__(self, model: nn.Module, algo_cfg, peers=None):
        self.model, self.cfg = model, algo_cfg
        self.peers = peers or Solo()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=algo_cfg.lr, eps=algo_cfg.adam_eps,
                                          betas=(algo_cfg.adam_beta1, algo_cfg.adam_beta2))
        self.version = 0  # number of optimizer steps taken
        self.device = next(model.parameters()).device

    def loss(self, batch) -> Dict[str, torch.Tensor]:
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
        if c.ppo_clip:
            policy_loss = losses.ppo_surrogate(ratio, adv, c.clip_ratio)
        else:
            policy_loss = -(logp * adv).mean()
        value_loss = 0.5 * (targets - values[:, :-1]).pow(2).mean()
        entropy = entropy.mean()
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
