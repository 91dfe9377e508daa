"""The gradient all-reduce really averages: one 2-process step over gloo equals one
single-process step on the union of both processes' batches (sample-weighted), to float tolerance.
Real torch.distributed process groups on 127.0.0.1; the real model, learner and DistPeers.
"""
import os

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from helpers import compose, free_port

from nodes.buffers import SlotBatch
from nodes.envs import EnvSpec
from nodes.learner import Learner
from nodes.models import ActorCritic

SPEC = EnvSpec((4,), np.float32, (3, 2))  # two action heads: the joint log-prob is a sum


def make_cfg():
    # Advantage normalisation is per node (as in DD-PPO); off, the union step is exactly the mean.
    # Clipping applies to the reduced gradient: part of what is checked.
    return compose("env=gym", "model.fc_size=16", "model.hidden_size=8",
                   "algo.normalize_advantages=false", "algo.max_grad_norm=0.5")


def make_batch(seed, n_traj, T=5):
    g = torch.Generator().manual_seed(seed)
    return SlotBatch(
        obs=torch.randn(n_traj, T + 1, 4, generator=g), meas=torch.zeros(n_traj, T + 1, 0),
        actions=torch.stack([torch.randint(0, n, (n_traj, T), generator=g) for n in SPEC.action_heads], -1),
        logp=-torch.rand(n_traj, T, generator=g) - 0.5, values=torch.randn(n_traj, T, generator=g),
        rewards=torch.randn(n_traj, T, generator=g), dones=torch.rand(n_traj, T, generator=g) < 0.2,
        versions=torch.zeros(n_traj, T, dtype=torch.int64), h0=torch.randn(n_traj, 8, generator=g))


def union(a, b):
    return SlotBatch(**{k: torch.cat([getattr(a, k), getattr(b, k)]) for k in SlotBatch.FIELDS})


def fresh_model():
    torch.manual_seed(123)
    return ActorCritic(SPEC, make_cfg().model)


def _rank(rank, port, sizes, out_dir):
    from sync.peers import DistPeers
    from sync.world import World
    cfg = make_cfg()
    peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), cfg.sync)
    model = fresh_model()
    learner = Learner(model, cfg.algo, peers)
    peers.start(model, learner.optimizer)
    stats = learner.train_step(make_batch(rank, sizes[rank]))
    torch.save({"params": [p.detach() for p in model.parameters()], "samples": stats["global_samples"]},
               os.path.join(out_dir, f"rank{rank}.pt"))
    peers.close()


@pytest.mark.parametrize("sizes", [(4, 4), (6, 2)], ids=["equal", "straggler-weighted"])
def test_two_node_step_equals_single_step_on_union(tmp_path, sizes):
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, sizes, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert r0["samples"] == r1["samples"] == sum(sizes) * 5
    # both ranks hold bit-identical parameters
    for a, b in zip(r0["params"], r1["params"]):
        assert torch.equal(a, b)
    # ... equal to one step of one learner on the union of the two batches
    model = fresh_model()
    learner = Learner(model, make_cfg().algo)
    before = [p.detach().clone() for p in model.parameters()]
    learner.train_step(union(make_batch(0, sizes[0]), make_batch(1, sizes[1])))
    for a, ref, _old in zip(r0["params"], model.parameters(), before):
        assert torch.allclose(a, ref.detach(), atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(a, old) for a, old in zip(r0["params"], before)), "the step changed nothing"
