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
from torch import nn

from nodes.envs import EnvSpec
from nodes.learning.learner import Learner
from nodes.models.actor_critic import ActorCritic
from nodes.sampling.buffers import SlotBatch

SPEC = EnvSpec((4,), np.float32, (3, 2))  # two action heads: the joint log-prob is a sum


def make_cfg(grad_dtype="fp32"):
    # Advantage normalisation is per node (as in DD-PPO); off, the union step is exactly the mean.
    # Clipping applies to the reduced gradient: part of what is checked.
    return compose("env=gym", "model.fc_size=16", "model.hidden_size=8",
                   "algo.normalize_advantages=false", "algo.max_grad_norm=0.5", f"sync.grad_dtype={grad_dtype}")


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


def _rank(rank, port, sizes, out_dir, grad_dtype="fp32"):
    from sync.dist_peers import DistPeers
    from sync.world import World
    cfg = make_cfg(grad_dtype)
    peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), cfg.sync)
    model = fresh_model()
    learner = Learner(model, cfg.algo, peers)
    stats = learner.train_step(make_batch(rank, sizes[rank]))
    torch.save({"params": [p.detach() for p in model.parameters()], "samples": stats["global_samples"]},
               os.path.join(out_dir, f"rank{rank}.pt"))
    peers.close()


@pytest.mark.parametrize("sizes,grad_dtype", [((4, 4), "fp32"), ((6, 2), "fp32"), ((6, 2), "bf16")],
                         ids=["equal", "straggler-weighted", "bf16 on the wire"])
def test_two_node_step_equals_single_step_on_union(tmp_path, sizes, grad_dtype):
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, sizes, str(tmp_path), grad_dtype)) for r in range(2)]
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
    if grad_dtype == "bf16":  # summed with 8 significant bits: the step, not its bits (the counts are exact, above)
        ours = torch.cat([(a - old).flatten() for a, old in zip(r0["params"], before)])
        ref = torch.cat([(p.detach() - old).flatten() for p, old in zip(model.parameters(), before)])
        error = float((ours - ref).norm() / ref.norm())
        assert error < 0.05, f"the bf16 step is {error:.1%} off the fp32 one"
        return
    for a, ref, _old in zip(r0["params"], model.parameters(), before):
        assert torch.allclose(a, ref.detach(), atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(a, old) for a, old in zip(r0["params"], before)), "the step changed nothing"


# ---------------------------------------------------------------- ranks that differ in which parameters got a gradient


class TwoHeads(nn.Module):
    """A body and a head that only some batches use; `spare` is used by none, `frozen` is not trained."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head, self.spare = nn.Linear(3, 2), nn.Linear(2, 1), nn.Linear(2, 2)
        self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)


def rank_grads(rank):
    """Rank r's model after its backward: rank 0's batch never reaches the head (no gradient there)."""
    model = TwoHeads()
    x = torch.full((4, 3), float(rank + 1))
    hidden = model.body(x)
    loss = hidden.sum() if rank == 0 else model.head(hidden).sum() + hidden.pow(2).sum()
    loss.backward()
    return model


HEAD_SAMPLES = (3, 5)  # each rank's sample count


def _heads_rank(rank, port, out_dir):
    from sync.dist_peers import DistPeers
    from sync.world import World
    peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), compose("sync.timeout_s=20").sync)
    model = rank_grads(rank)
    total, _ = peers.reduce_gradients(model, HEAD_SAMPLES[rank])
    torch.save({"total": total, "grads": {n: None if p.grad is None else p.grad.clone()
                                          for n, p in model.named_parameters()}},
               os.path.join(out_dir, f"rank{rank}.pt"))
    peers.close()


def test_ranks_that_differ_in_which_parameters_have_a_gradient_end_with_the_same_mean(tmp_path):
    """Rank 0 has no gradient for the head, rank 1 has: both send every parameter (rank 0 zeros for
    the head), and both end with the sample-weighted mean, the head's included, so they step alike.
    Before, rank 0 left the head out and the two flat buffers differed in length."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_heads_rank, args=(r, port, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert r0["total"] == r1["total"] == sum(HEAD_SAMPLES)
    local = [dict(rank_grads(r).named_parameters()) for r in range(2)]
    assert local[0]["head.weight"].grad is None and local[1]["head.weight"].grad is not None
    for name in local[0]:
        if name.startswith(("spare", "frozen")):  # no rank had a gradient: none is made up
            assert r0["grads"][name] is None and r1["grads"][name] is None, name
            continue
        grads = [p[name].grad if p[name].grad is not None else torch.zeros_like(p[name]) for p in local]
        expected = sum(n * g for n, g in zip(HEAD_SAMPLES, grads)) / sum(HEAD_SAMPLES)
        assert torch.equal(r0["grads"][name], r1["grads"][name]), name
        assert torch.allclose(r0["grads"][name], expected, atol=1e-6), name


def test_flat_buffer_sum_unpacks_to_the_sample_weighted_mean_with_flags_and_missing_gradients():
    """sync.flat_grads on its own: two ranks' buffers summed (what the all-reduce does) unpack to
    the sample-weighted mean; a parameter only one rank had a gradient for gets the mean (zeros
    counted for the other); one no rank had keeps None; sums and flags are summed."""
    from sync.flat_grads import pack, unpack

    def params(grads):
        ps = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2, 2)), nn.Parameter(torch.zeros(1))]
        for p, g in zip(ps, grads):
            p.grad = None if g is None else torch.full_like(p, g)
        return ps

    a, b = params([1.0, 2.0, None]), params([4.0, None, None])
    flat_a, size = pack(a, 3, (1.0, 0.0), torch.tensor([1.0, 2.0]))
    flat_b, _ = pack(b, 1, (0.0, 1.0), torch.tensor([10.0, 20.0]))
    sums = torch.zeros(2)
    total, stops, joins = unpack(a, flat_a + flat_b, size, sums)
    assert (total, stops, joins) == (4.0, 1.0, 1.0)
    assert torch.allclose(a[0].grad, torch.full((3,), (3 * 1.0 + 1 * 4.0) / 4))
    assert torch.allclose(a[1].grad, torch.full((2, 2), 3 * 2.0 / 4))
    assert a[2].grad is None
    assert sums.tolist() == [11.0, 22.0]
    unpack(b, flat_a + flat_b, size, torch.zeros(2))  # b had no gradient for p1: it gets the mean
    assert torch.allclose(b[1].grad, torch.full((2, 2), 1.5)) and b[2].grad is None
