"""Learner: the APPO gradient step on a batch from nodes.sampling.batcher.

The step: BPTT unroll, V-trace (or GAE) targets, PPO-clipped (or plain) policy loss + value loss
- entropy bonus, backward, `peers.reduce_gradients` (the sample-weighted mean over nodes, with the
running norms' batch moments summed in the same collective; the identity for one node),
gradient-norm clipping, Adam, then the observation statistics folded in. nodes/ never imports what
implements `peers`.

On a GPU the step never waits for the device until its very end: every logged scalar stays a
device tensor until one `.tolist()` (the iteration's only host sync; tests/test_device_paths.py
runs the step on the `meta` device, where any earlier sync or stray CPU tensor raises). The
policy lag comes from the batch's CPU copy of the versions, and the all-reduce is timed with CUDA
events (host timers would count the backward it waits for).
"""
from __future__ import annotations

import time

import torch
from torch import nn

from nodes.config.validate import LR_SCALING
from nodes.learning import losses
from nodes.learning.adam import Adam
from nodes.models.normalisers import RunningNorm, batch_moments, fold_moments
from nodes.models.numerics import autocast
from nodes.record.profile import LEARNER, Clock
from nodes.run.peers import Solo

FORWARD, LOSS, BACKWARD, ALLREDUCE, OPTIMIZER, OBS_NORM, STATS = (
    LEARNER.index(p) for p in ("forward", "loss", "backward", "allreduce", "optimizer", "obs_norm", "stats"))

LOGGED = ("loss", "policy_loss", "value_loss", "entropy", "ratio_dev", "kl", "grad_norm")


def make_optimizer(model: nn.Module, c) -> torch.optim.Optimizer | Adam:
    device = next(model.parameters()).device
    betas = (c.adam_beta1, c.adam_beta2)
    if device.type == "cuda":  # fused Adam: one kernel for every parameter (a loop is launch-bound there)
        return torch.optim.Adam(model.parameters(), lr=c.lr, eps=c.adam_eps, betas=betas, fused=True)
    return Adam(model.parameters(), lr=c.lr, eps=c.adam_eps, betas=betas)  # torch.optim's, without its dynamo import


class Learner:
    def __init__(self, model: nn.Module, algo_cfg, peers=None, precision: str = "fp32", member: int = 0):
        """member: the population member this learner trains (its all-reduce group)."""
        self.model, self.cfg, self.precision, self.member = model, algo_cfg, precision, member
        self.peers = peers or Solo()
        self.optimizer = make_optimizer(model, algo_cfg)
        # the lr (algo.lr, or PBT's), and the factor on it: algo.lr_schedule's decay times
        # algo.lr_scaling's factor for the nodes in the world (schedule_lr; None after a load: not
        # known yet, the optimizer's lr is rewritten at the next schedule_lr)
        self.base_lr = algo_cfg.lr
        self.lr_factor: float | None = 1.0
        self.version = 0  # number of optimizer steps taken
        self.device = next(model.parameters()).device
        self.clock = Clock()  # the node hands it its row of the phase table (nodes.record.profile)
        # algo.normalize_returns: running moments of the value targets (summed over nodes, so every
        # rank holds the same); the critic then predicts targets in units of their std
        self.returns = RunningNorm(()).to(self.device) if algo_cfg.normalize_returns else None
        self._targets: torch.Tensor | None = None  # the last loss's value targets, for `returns`

    def loss(self, batch) -> dict[str, torch.Tensor]:
        c = self.cfg
        mask = batch.valid_mask()  # None: every step counts (all but a population's cut trajectories)
        with autocast(self.device, self.precision):
            logits, values = self.model.unroll(batch.obs, batch.meas, batch.h0, batch.dones)
        self.clock(LOSS)
        # summed over action heads; one log-softmax per head serves both
        logp, entropy = self.model.heads.log_prob_and_entropy(logits[:, :-1], batch.actions)
        log_ratio = logp - batch.logp
        if mask is not None:  # the steps after a cut hold another trajectory's leftovers: keep them finite
            log_ratio = torch.where(mask, log_ratio, torch.zeros_like(log_ratio))
        ratio = torch.exp(log_ratio)
        # the critic's values (the learner's and the behaviour ones) in reward units
        to_reward = self.returns.denormalize if self.returns is not None else (lambda v: v)
        reward_values = to_reward(values.detach())
        rewards = batch.rewards
        if c.value_bootstrap:  # a time limit is not the task's end: the value there goes on
            rewards = rewards + c.gamma * to_reward(batch.values) * batch.timeouts
        if c.vtrace:
            targets, adv = losses.vtrace(rewards, reward_values, batch.dones, log_ratio.detach(),
                                         c.gamma, c.vtrace_rho, c.vtrace_c)
        else:
            behaviour_values = torch.cat([to_reward(batch.values), reward_values[:, -1:]], 1)
            targets, adv = losses.gae(rewards, behaviour_values, batch.dones, c.gamma, c.gae_lambda)
        if c.normalize_advantages:
            if mask is None:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            else:
                valid = adv[mask]
                adv = (adv - valid.mean()) / (valid.std() + 1e-8)
        if c.ppo_clip:
            policy_loss = losses.ppo_surrogate(ratio, adv, c.clip_ratio, mask)
        else:
            policy_loss = -losses.mean(logp * adv, mask)
        self._targets = targets if mask is None else targets[mask]
        if self.returns is not None:  # the critic learns the targets in its own units
            targets = self.returns.normalize(targets)
        value_loss = losses.value_loss(values[:, :-1], targets, batch.values, c.value_clip, mask)
        entropy = losses.mean(entropy, mask)
        exploration = self._exploration(logits[:, :-1], entropy, mask)
        # off (0): logged, out of the graph (an overflowing expm1 there would make 0 x inf = NaN gradients)
        kl = losses.mean(losses.kl_to_behaviour(log_ratio if c.kl_coeff else log_ratio.detach()), mask)
        total = policy_loss + c.value_loss_coeff * value_loss + c.entropy_coeff * exploration
        if c.kl_coeff:
            total = total + c.kl_coeff * kl
        return dict(loss=total, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                    ratio_dev=losses.mean((ratio - 1).abs(), mask), kl=kl)

    def _exploration(self, params, entropy, mask):
        """The exploration loss (algo.exploration_loss): minus the entropy bonus, or the symmetric KL
        to the uniform policy over the discrete heads (losses.symmetric_kl_to_uniform says why
        continuous dims have none; no discrete head: no term)."""
        if self.cfg.exploration_loss != "symmetric_kl":
            return -entropy
        split = self.model.heads.split(params)
        if not split:
            return torch.zeros_like(entropy)
        return losses.exploration_term(losses.mean(losses.symmetric_kl_to_uniform(split), mask))

    def device_step(self, batch, vote: int = 0,
                    fold_norms: bool = True) -> tuple[torch.Tensor, int, int, SyncTimer]:
        """The step without any host sync of its own: (the logged scalars as one device tensor, in
        LOGGED order; the samples over all ranks; the world's stop vote, this rank's `vote` among
        them (nodes.run.peers.world_vote: it rides in the gradient all-reduce); the all-reduce's timer,
        read after the sync). fold_norms: the batch's observation and return moments go into the
        running norms (a batch's later epochs pass False: its samples are counted once)."""
        self.clock(FORWARD)
        batch = batch.to(self.device)
        if batch.num_samples:
            parts = self.loss(batch)
            self.clock(BACKWARD)
            self.optimizer.zero_grad(set_to_none=False)
            parts["loss"].backward()
        else:  # a population member with no trajectories on this rank: it joins its all-reduce with none
            parts = self._nothing()
        self.clock(OBS_NORM)
        # The batch's moments for the running norms (observations, measurements, returns) ride in the
        # gradient all-reduce: at scale a collective of their own costs the ring's whole latency.
        updates = self.model.norm_updates(batch.obs[:, :-1], batch.meas[:, :-1]) if fold_norms else []
        if self.returns is not None and fold_norms:
            updates.append((self.returns, self._targets))
        # (a batch's later epochs fold nothing: an empty vector rides along)
        moments = batch_moments(updates) if updates else torch.zeros(0, device=self.device)
        self.clock(ALLREDUCE)
        timer = SyncTimer(self.device)
        global_samples, stop_voted = self.peers.reduce_gradients(self.model, batch.valid_samples, vote, moments,
                                                                 member=self.member)
        timer.stop()
        self.clock(OPTIMIZER)
        if not global_samples:  # no rank had any: no step (the same answer on every rank)
            return torch.zeros(len(LOGGED), device=self.device), 0, stop_voted, timer
        if self.cfg.max_grad_norm > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        else:
            grad_norm = parts["loss"].new_zeros(())
        self.optimizer.step()
        # Observation statistics change the policy too, so they move with the version: folded in
        # after the loss, the learner's policy at loss time is exactly the published one.
        fold_moments(updates, moments)
        self.version += 1
        self.clock(STATS)
        scalars = torch.stack([parts[k].detach().float() for k in LOGGED[:-1]] + [grad_norm.detach().float()])
        return scalars, global_samples, stop_voted, timer

    def _nothing(self) -> dict[str, torch.Tensor]:
        """An empty batch's loss parts (zeros), its gradients zero and present (the all-reduce sends
        every parameter's), and no value targets."""
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()
        self._targets = torch.zeros(0, device=self.device)
        zero = torch.zeros((), device=self.device)
        return dict(loss=zero, policy_loss=zero, value_loss=zero, entropy=zero, ratio_dev=zero, kl=zero)

    def train_step(self, batch, vote: int = 0) -> dict[str, float]:
        """One iteration on a batch: algo.epochs x algo.minibatches optimizer steps (one by
        default); `vote`: this rank's vote to stop after it (nodes.run.peers; stats["stop_voted"]: the
        world's, 0 when none voted). An empty batch (a population member without trajectories here)
        only joins the all-reduces; with none on any rank there is no step (stats["global_samples"]
        0, the version unchanged). The logged scalars are the steps' mean; global_samples counts the
        batch once."""
        t0 = time.perf_counter()
        lag = (self.version - batch.versions).float()  # the CPU copy: no device work
        if batch.lengths is not None and int(batch.lengths.min()) < lag.shape[1]:  # the steps trained on
            lag = lag[torch.arange(lag.shape[1])[None, :] < batch.lengths[:, None]]
        if not lag.numel():
            lag = torch.zeros(1)
        total, global_samples, stop_voted, timers = None, 0, 0, []
        for epoch, part in self._passes(batch):
            scalars, samples, voted, timer = self.device_step(part, vote, fold_norms=epoch == 0)
            total = scalars if total is None else total + scalars
            global_samples += samples if epoch == 0 else 0
            stop_voted, timers = stop_voted or voted, timers + [timer]
        stats = dict(zip(LOGGED, (total / len(timers)).tolist()))  # the one host sync of the iteration
        stats.update(policy_lag_mean=float(lag.mean()), policy_lag_max=float(lag.max()),
                     global_samples=global_samples, stop_voted=float(stop_voted), lr=self.lr,
                     sync_s=sum(t.seconds() for t in timers), step_s=time.perf_counter() - t0)
        return stats

    def _passes(self, batch):
        """(epoch, minibatch) pairs: the batch itself once (1 x 1), or each epoch's random split of
        its trajectories into algo.minibatches parts (whole trajectories: the recurrent core and
        the advantages need them). The order is drawn from the version, so every rank and every
        repeat of a deterministic run draws the same."""
        epochs, parts = self.cfg.epochs, self.cfg.minibatches
        if epochs == 1 and parts == 1:
            return [(0, batch)]
        batch = batch.to(self.device)
        order = torch.Generator().manual_seed(self.version)
        trajectories = batch.rewards.shape[0]
        return [(epoch, batch.select(idx)) for epoch in range(epochs)
                for idx in torch.randperm(trajectories, generator=order).tensor_split(parts)]

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_hyper(self, lr: float, entropy_coeff: float) -> None:
        """A population member's hyper-parameters (PBT): the optimizer's learning rate (times the
        schedule's factor) and the exploration loss's coefficient (self.cfg is this learner's own copy)."""
        self.base_lr = lr
        self._set_lr(lr * (1.0 if self.lr_factor is None else self.lr_factor))
        self.cfg.entropy_coeff = entropy_coeff

    def schedule_lr(self, progress: float, nodes: int = 1) -> None:
        """algo.lr_schedule at `progress` (the run's env frames / train.max_env_frames, equal on every
        rank) times algo.lr_scaling's factor for `nodes` in the world: linear decay scales the lr
        by 1 - progress, lr_scaling by nodes ** (0, 1/2, 1). The optimizer's lr is base_lr x factor
        whatever it held before: a resumed run's saved lr was scaled for the nodes and the progress
        of another launch (load_state_dict), and its algo.lr may have been changed since."""
        c = self.cfg
        decay = max(0.0, 1.0 - progress) if c.lr_schedule == "linear" else 1.0
        factor = decay * nodes ** LR_SCALING[c.lr_scaling]
        if factor != self.lr_factor:
            self.lr_factor = factor
            self._set_lr(self.base_lr * factor)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "policy_version": self.version, "model_identity": self.model.identity()}
        if self.returns is not None:
            state["returns"] = self.returns.state_dict()
        return state

    def load_state_dict(self, state: dict, path: str = "") -> None:
        self.model.check_fit(state.get("model_identity"), state["model"], path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        # the saved lr holds the saved launch's factor (and its algo.lr): this launch's base lr until
        # schedule_lr sets this launch's factor on it, at the next iteration
        self.lr_factor = None
        self._set_lr(self.base_lr)
        self.version = int(state["policy_version"])
        if self.returns is not None and "returns" in state:  # a run that had them off starts them afresh
            self.returns.load_state_dict(state["returns"])


class SyncTimer:
    """Seconds spent in the gradient all-reduce: a host timer on the CPU; on CUDA a pair of events
    on the compute stream, from the end of the backward to the reduced gradients, read after the
    iteration's host sync."""

    def __init__(self, device: torch.device):
        self.events = None
        if device.type == "cuda":
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.events[0].record()
        self.t0, self.t1 = time.perf_counter(), None

    def stop(self) -> None:
        if self.events is not None:
            self.events[1].record()
        self.t1 = time.perf_counter()

    def seconds(self) -> float:
        if self.events is not None:
            self.events[1].synchronize()
            return self.events[0].elapsed_time(self.events[1]) / 1000.0
        return self.t1 - self.t0
