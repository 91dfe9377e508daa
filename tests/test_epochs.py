"""algo.epochs x algo.minibatches: several optimizer steps per batch, each on whole trajectories,
the batch counted once (frames, running norms)."""
import numpy as np
import pytest
import torch
from helpers import compose

from nodes.config.layout import node_batch_size, splits_batch
from nodes.envs import EnvSpec
from nodes.learning.learner import Learner
from nodes.models.actor_critic import ActorCritic
from nodes.sampling.buffers import SlotBatch

SPEC = EnvSpec((4,), np.float32, (3,))


def _batch(trajectories=8, steps=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return SlotBatch(obs=torch.randn(trajectories, steps + 1, 4, generator=g),
                     meas=torch.zeros(trajectories, steps + 1, 0),
                     actions=torch.randint(0, 3, (trajectories, steps, 1), generator=g).float(),
                     logp=torch.full((trajectories, steps), -1.1), values=torch.zeros(trajectories, steps),
                     rewards=torch.randn(trajectories, steps, generator=g),
                     dones=torch.rand(trajectories, steps, generator=g) < 0.2,
                     versions=torch.zeros(trajectories, steps, dtype=torch.int64), h0=torch.zeros(trajectories, 8))


def _learner(epochs, minibatches):
    cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", f"algo.epochs={epochs}",
                  f"algo.minibatches={minibatches}")
    torch.manual_seed(0)
    return Learner(ActorCritic(SPEC, cfg.model), cfg.algo)


def test_each_epoch_steps_once_per_minibatch_and_counts_the_batch_once():
    learner, batch = _learner(2, 4), _batch()
    stats = learner.train_step(batch)
    assert learner.version == 8  # 2 epochs x 4 minibatches: a policy version per optimizer step
    assert stats["global_samples"] == batch.num_samples == 40  # the frames of the batch, once
    assert learner.model.obs_norm.count.item() == 40 and learner.returns.count.item() == 40
    one = _learner(1, 1)
    one.train_step(batch)
    assert one.version == 1 and one.model.obs_norm.count.item() == 40


def test_minibatches_split_whole_trajectories_in_an_order_every_rank_draws_alike():
    learner, batch = _learner(2, 4), _batch()
    passes = learner._passes(batch)
    assert [epoch for epoch, _ in passes] == [0, 0, 0, 0, 1, 1, 1, 1]
    for epoch in (0, 1):  # each epoch covers every trajectory once, whole (all its steps)
        parts = [part for e, part in passes if e == epoch]
        assert all(p.rewards.shape == (2, 5) for p in parts)
        rows = sorted(tuple(r.tolist()) for p in parts for r in p.rewards)
        assert rows == sorted(tuple(r.tolist()) for r in batch.rewards)
    again = _learner(2, 4)._passes(batch)  # the order follows the version: the same on every rank
    assert all(torch.equal(a.rewards, b.rewards) for (_, a), (_, b) in zip(passes, again))
    assert not torch.equal(passes[0][1].rewards, passes[4][1].rewards)  # epochs reshuffle


def test_several_steps_move_the_policy_further_than_one():
    batch = _batch()
    params = {}
    for key in ((1, 1), (4, 2)):
        learner = _learner(*key)
        before = torch.cat([p.detach().flatten().clone() for p in learner.model.parameters()])
        learner.train_step(batch)
        after = torch.cat([p.detach().flatten() for p in learner.model.parameters()])
        params[key] = (after - before).norm().item()
    assert params[(4, 2)] > 2 * params[(1, 1)]


@pytest.mark.parametrize("minibatches", [3])
def test_uneven_minibatches_are_fine(minibatches):
    learner = _learner(1, minibatches)
    stats = learner.train_step(_batch())  # 8 trajectories in 3 parts: 3, 3, 2
    assert learner.version == 3 and stats["global_samples"] == 40


def test_a_linear_lr_schedule_scales_the_lr_pbt_sets_and_constant_leaves_it():
    cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", "algo.lr=0.002", "algo.lr_schedule=linear")
    learner = Learner(ActorCritic(SPEC, cfg.model), cfg.algo)
    learner.schedule_lr(0.25)
    assert learner.lr == pytest.approx(0.0015)
    learner.set_hyper(0.004, 0.01)  # a PBT step: the new lr, still scaled
    assert learner.lr == pytest.approx(0.003)
    learner.train_step(_batch())
    learner.schedule_lr(1.2)  # past the end (the last batch overshoots): 0, not negative
    assert learner.lr == 0.0
    before = [p.detach().clone() for p in learner.model.parameters()]
    learner.train_step(_batch(seed=1))
    assert all(torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))  # lr 0: no move
    const = _learner(1, 1)
    const.optimizer.param_groups[0]["lr"] = 5e-5  # as a resumed checkpoint leaves it
    const.schedule_lr(0.5)
    assert const.lr == 5e-5


@pytest.mark.parametrize("scaling, factors", [("linear", (4.0, 2.0)), ("sqrt", (2.0, 2 ** 0.5)), ("none", (1.0, 1.0))])
def test_lr_scaling_follows_the_nodes_in_the_world_and_the_schedule(scaling, factors):
    cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", "algo.lr=0.001", f"algo.lr_scaling={scaling}",
                  "algo.lr_schedule=linear", "train.max_env_frames=1000")
    learner = Learner(ActorCritic(SPEC, cfg.model), cfg.algo)
    learner.schedule_lr(0.0, nodes=4)
    assert learner.lr == pytest.approx(0.001 * factors[0])
    learner.schedule_lr(0.5, nodes=2)  # a node left, and the decay is half way
    assert learner.lr == pytest.approx(0.001 * factors[1] * 0.5)
    learner.set_hyper(0.002, 0.01)  # PBT's lr is the one scaled
    assert learner.lr == pytest.approx(0.002 * factors[1] * 0.5)
    learner.schedule_lr(0.0, nodes=1)  # alone again, at the start: the lr itself
    assert learner.lr == pytest.approx(0.002)


def test_a_global_batch_is_split_into_whole_rollouts_over_the_launched_nodes():
    s = compose("sampler.batch_size=1024", "sampler.rollout=32").sampler
    assert node_batch_size(s, 1, True) == 1024 and node_batch_size(s, 4, False) == 1024
    assert node_batch_size(s, 4, True) == 256 and node_batch_size(s, 3, True) == 320  # 341 -> 10 rollouts
    assert node_batch_size(s, 64, True) == 32  # 16 samples: one rollout each, at least
    s.mode = "sync"  # a round of every env: no share
    assert node_batch_size(s, 4, True) == 1024


def test_auto_splits_the_world_batch_on_cpu_nodes_and_not_on_gpu_nodes():
    """sync.global_batch=auto (the default): a GPU learner's iteration does not shrink with its batch,
    so GPU nodes learn on the whole batch; true and false mean the same on either."""
    assert compose().sync.global_batch == "auto"
    assert splits_batch("auto", "cpu") and not splits_batch("auto", "cuda") and not splits_batch("auto", "cuda:1")
    for device in ("cpu", "cuda"):
        assert splits_batch(True, device) and not splits_batch(False, device)
