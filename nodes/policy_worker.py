"""Policy worker: batched inference over every env group that is waiting for an action.

Stateless (hidden states live in shared memory), so any number of policy workers can serve any
env. Each loop takes all pending requests, runs one forward pass, writes actions, log-probs,
values, the policy version and (at a slot's first step) the initial hidden state into the
trajectory buffers, and tells each rollout worker which of its groups may step.
"""
from __future__ import annotations

import queue
import time

import torch

from nodes import seeds
from nodes.buffers import env_groups
from nodes.models import ActorCritic
from nodes.weights import WeightsReader


def run_policy_worker(cfg, rank: int, index: int, spec, buffers, channels, control, shared_weights) -> None:
    torch.manual_seed(seeds.derive(cfg.seed, seeds.POLICY_SAMPLING, rank, index))
    model = ActorCritic(spec, cfg.model)
    model.eval()
    weights = WeightsReader(shared_weights, model)
    while not weights.maybe_update():  # the learner publishes its weights before we start
        time.sleep(0.001)
    groups = [[torch.as_tensor(ids) for ids in worker] for worker in env_groups(cfg.sampler)]
    channels.reports.put(("ready", f"policy{index}"))
    while not control.stop[0]:
        try:
            requests = channels.requests.get_many(timeout=0.1)
        except queue.Empty:
            continue
        weights.maybe_update()
        env_ids = torch.cat([groups[w][g] for w, g in requests])
        slots = buffers.env_slot[env_ids]
        ts = buffers.env_t[env_ids]
        h = buffers.env_h[env_ids]
        with torch.inference_mode():
            logits, values, h_new = model.step(buffers.obs[slots, ts], buffers.meas[slots, ts], h)
            actions = model.heads.sample(logits)  # [B, heads]
            buffers.actions[slots, ts] = actions
            buffers.logp[slots, ts] = model.heads.log_prob(logits, actions)
            buffers.values[slots, ts] = values
            buffers.versions[slots, ts] = weights.version
            first = ts == 0
            if bool(first.any()):
                buffers.h0[slots[first]] = h[first]
            if model.recurrent:
                buffers.env_h[env_ids] = h_new
        for w, g in requests:
            channels.actions[w].put(g)
