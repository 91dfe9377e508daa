"""A population's parts, in-process: who plays which env, trajectories cut at a member change
(the learner ignores what follows the cut), PBT's decisions, a replacement's copy, checkpoints."""
import copy

import numpy as np
import pytest
import torch
from helpers import compose

from nodes.envs import env_spec
from nodes.errors import CheckpointError
from nodes.learning.learner import Learner
from nodes.models.actor_critic import ActorCritic
from nodes.models.numerics import param_checksum
from nodes.population.assignment import Assignment
from nodes.population.hypers import Hyper
from nodes.population.member_stats import MemberStats, merge_members
from nodes.population.members import Members
from nodes.population.pbt import Pbt
from nodes.run.peers import Solo
from nodes.sampling.buffers import SlotBatch

GYM = ("env=gym", "env.id=CartPole-v1", "model.fc_size=16", "model.hidden_size=8")


def test_fixed_assignment_gives_each_member_a_block_of_envs_for_good():
    cfg = compose("population.size=3")  # 2 workers x 8 envs
    a = Assignment(cfg, rank=0, first_env=8, count=8)  # worker 1's envs
    assert [a.first(e) for e in range(8, 16)] == [1, 1, 1, 2, 2, 2, 2, 2]  # e * 3 // 16
    assert all(a.next(e, a.first(e)) == a.first(e) for e in range(8, 16))
    four = Assignment(compose("population.size=4"), 0, 0, 8)
    assert [four.first(e) for e in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]  # each env group one member


def test_episode_assignment_draws_every_member_from_each_envs_own_stream():
    cfg = compose("population.size=4", "population.assign=episode")
    draws = [Assignment(cfg, 0, 0, 2) for _ in range(2)]
    seqs = [[d.next(0) for _ in range(400)] for d in draws]
    assert seqs[0] == seqs[1]  # reproducible for the seed
    counts = np.bincount(seqs[0], minlength=4)
    assert counts.min() > 60, counts  # uniform: 100 expected each
    other = Assignment(compose("population.size=4", "population.assign=episode", "seed=1"), 0, 0, 2)
    assert [other.next(0) for _ in range(400)] != seqs[0]


def test_match_seats_always_draw_their_member_self_play():
    cfg = compose("env=doom_duel", "population.size=2")  # population.assign=fixed: seats draw anyway
    a = Assignment(cfg, 0, 0, 4)
    assert a.draws and len({a.next(0) for _ in range(50)}) == 2


def test_with_snapshots_every_seat_but_the_first_may_play_one_once_one_exists():
    cfg = compose("env=doom_duel", "population.snapshots=2", "population.snapshot_prob=0.5")
    taken = np.zeros(1, dtype=np.int64)
    a = Assignment(cfg, 0, 0, 4, snapshots=taken)
    assert a.mixed and a.draws
    assert {a.next(e) for e in range(4) for _ in range(20)} == {0}  # none taken yet: member 0 (P=1)
    taken[0] = 2
    first = [a.next(0) for _ in range(200)] + [a.next(2) for _ in range(200)]  # seat 0 of two matches
    second = np.array([a.next(1) for _ in range(400)])
    assert set(first) == {0}  # the first seat is always a learner
    assert set(second.tolist()) == {0, 1, 2} and 150 < (second > 0).sum() < 250  # snapshots 0, 1 as 1, 2


def _batch(spec, T=6, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 255, (B, T + 1, *spec.obs_shape), generator=g).to(torch.uint8) \
        if spec.obs_dtype == np.uint8 else torch.randn(B, T + 1, *spec.obs_shape, generator=g)
    return SlotBatch(obs=obs, meas=torch.zeros(B, T + 1, 0), actions=torch.randint(0, 2, (B, T, 1), generator=g),
                     logp=torch.randn(B, T, generator=g) * 0.1 - 0.7, values=torch.randn(B, T, generator=g),
                     rewards=torch.randn(B, T, generator=g), dones=torch.zeros(B, T, dtype=torch.bool),
                     versions=torch.zeros(B, T, dtype=torch.int64), h0=torch.zeros(B, 8))


def test_steps_after_a_member_change_do_not_count_in_the_loss_or_its_gradients():
    """A slot cut at a member change (its episode ended at step 2, lengths 3): whatever its later
    steps hold (another trajectory's leftovers), loss, gradients and samples are the same."""
    cfg = compose(*GYM)
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model)
    results = []
    for garbage_seed in (1, 2):
        b = _batch(spec)
        b.dones[0, 2] = True  # the episode ended with step 2: the slot was cut there
        junk = _batch(spec, seed=garbage_seed)
        for name in ("obs", "actions", "logp", "values", "rewards", "dones"):
            getattr(b, name)[0, 3 + (name == "obs"):] = getattr(junk, name)[0, 3 + (name == "obs"):]
        b.logp[0, 4] = -1000.0 * garbage_seed  # a leftover whose ratio would overflow to inf (and NaN x 0)
        b.lengths = torch.tensor([3, 6, 6])
        learner = Learner(copy.deepcopy(model), cfg.algo)
        parts = learner.loss(b)
        parts["loss"].backward()
        grads = torch.cat([p.grad.flatten() for p in learner.model.parameters()])
        results.append((parts["loss"].item(), grads, b.valid_samples))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-7)
    assert results[0][2] == results[1][2] == 15
    # and the mask matters: counting the cut steps would change the loss
    b.lengths = None
    assert Learner(copy.deepcopy(model), cfg.algo).loss(b)["loss"].item() != pytest.approx(results[1][0], rel=1e-4)


def test_an_empty_batch_takes_no_step_alone():
    cfg = compose(*GYM)
    spec = env_spec(cfg.env)
    learner = Learner(ActorCritic(spec, cfg.model), cfg.algo, Solo())
    before = param_checksum(learner.model)
    empty = _batch(spec, B=0)
    stats = learner.train_step(empty)
    assert stats["global_samples"] == 0 and learner.version == 0 and param_checksum(learner.model) == before


def _pbt(size=4, **over):
    cfg = compose("population.size=4", "pbt.period_frames=100", *[f"pbt.{k}={v}" for k, v in over.items()]).pbt
    return Pbt(cfg, size, seed=0, shaping_names=["shaping.HEALTH"])


def _hypers(size=4):
    return [Hyper(1e-4 * (p + 1), 1e-3, [0.5]) for p in range(size)]


def test_pbt_replaces_the_bottom_member_with_a_mutated_copy_of_a_top_one_when_due():
    pbt = _pbt()
    assert pbt.next_at == 100 and not pbt.due(99) and pbt.due(100)
    hypers = _hypers()
    events = pbt.decide([3.0, 1.0, 9.0, 5.0], hypers, 100)  # 4 x 0.3 -> one replaced: member 1 by member 2
    assert [(e["member"], e["source"]) for e in events] == [(1, 2)]
    old, new = events[0]["old"], events[0]["new"]
    assert old == hypers[1].as_dict() and events[0]["source_hyper"] == hypers[2].as_dict()
    source = hypers[2].as_dict()
    changed = [k for k in ("lr", "entropy_coeff") if new[k] != source[k]] + (["shaping"] if new["shaping"] !=
                                                                               source["shaping"] else [])
    assert changed, "a replaced member always differs from its source in some hyper-parameter"
    for k in ("lr", "entropy_coeff"):
        assert new[k] == pytest.approx(source[k]) or new[k] / source[k] == pytest.approx(1.2 ** (1 if new[k] >
                                                                                                    source[k] else -1))
    assert pbt.next_at == 200 and not pbt.due(150)
    line = pbt.describe(events[0])
    assert "member 1 (objective 1.000) takes member 2's weights (objective 9.000), mutated: " in line


def test_pbt_decisions_are_the_same_for_the_same_seed_and_inputs():
    runs = []
    for _ in range(2):
        pbt = _pbt()
        runs.append([pbt.decide([float(i % 3), 1.0, 2.0, 0.5], _hypers(), 100 * (i + 1)) for i in range(6)])
    assert runs[0] == runs[1]


def test_pbt_waits_for_every_objective_and_keeps_members_within_the_gap():
    pbt = _pbt()
    assert pbt.decide([1.0, None, 2.0, 3.0], _hypers(), 100) == [] and pbt.steps == 0 and pbt.due(100)
    # best 10.0 vs worst 9.5: a gap of 5 % is under the 10 % the recipe needs
    assert pbt.decide([9.5, 9.8, 9.9, 10.0], _hypers(), 100) == [] and pbt.steps == 1 and not pbt.due(150)


def test_pbt_is_off_for_one_member_or_period_zero():
    assert not _pbt(size=1).enabled
    assert not _pbt(period_frames=0).enabled and not _pbt(period_frames=0).due(10**12)


def test_a_replaced_member_holds_copies_of_the_sources_weights_and_optimizer_state(tmp_path):
    cfg = compose(*GYM, "population.size=2")
    spec = env_spec(cfg.env)
    members = Members(cfg, spec, Solo(), torch.device("cpu"))
    a, b = members.learners
    assert param_checksum(a.model) != param_checksum(b.model)  # members start apart (their own init seeds)
    for learner in members.learners:
        learner.train_step(_batch(spec, B=4, seed=learner.member))
    members.stats[0].add(5.0, 5.0, None)
    members.replace(0, 1, Hyper(3e-4, 2e-3, []))
    assert param_checksum(a.model) == param_checksum(b.model)
    assert a.version == 2 and a.lr == 3e-4 and a.cfg.entropy_coeff == 2e-3 and b.cfg.entropy_coeff != 2e-3
    assert members.stats[0].episodes == 0  # the old policy's episodes are forgotten
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg"], sb[k]["exp_avg"]) for k in sa)
    assert all(sa[k]["exp_avg"].data_ptr() != sb[k]["exp_avg"].data_ptr() for k in sa)  # copies, not shared
    a.train_step(_batch(spec, B=4, seed=7))
    assert param_checksum(a.model) != param_checksum(b.model)
    assert b.optimizer.state_dict()["state"][0]["step"] == 1


def test_a_population_checkpoint_restores_members_hypers_and_pbt_and_refuses_another_size():
    cfg = compose(*GYM, "population.size=2", "pbt.period_frames=100")
    spec = env_spec(cfg.env)
    members = Members(cfg, spec, Solo(), torch.device("cpu"))
    members.merged = [{"reward": 1.0}, {"reward": 5.0}]
    events = members.pbt_step(frames=200)
    assert [(e["member"], e["source"]) for e in events] == [(0, 1)]
    state = copy.deepcopy(members.state_dict())
    other = Members(cfg, spec, Solo(), torch.device("cpu"))
    other.load_state_dict(state, "ckpt")
    assert [param_checksum(m.model) for m in other.learners] == [param_checksum(m.model) for m in members.learners]
    assert [h.as_dict() for h in other.hypers] == [h.as_dict() for h in members.hypers]
    assert other.learners[0].lr == members.hypers[0].lr
    assert other.pbt.events == members.pbt.events and other.pbt.next_at == members.pbt.next_at == 200
    with pytest.raises(CheckpointError, match="holds a population of 2; this run has population.size=3"):
        Members(compose(*GYM, "population.size=3"), spec, Solo(), torch.device("cpu")).load_state_dict(state, "c")
    with pytest.raises(CheckpointError, match="holds one policy; this run has population.size=2"):
        other.load_state_dict(members.learners[0].state_dict(), "c")


def test_member_rows_merge_over_ranks_weighted_by_their_counts():
    ranks = []
    for rewards, wins in (([1.0, 3.0], [1.0, 0.0]), ([5.0], [1.0])):
        stats = [MemberStats(2), MemberStats(2)]
        for r, w in zip(rewards, wins):
            stats[0].add(r, 10 * r, dict(frags=r, deaths=0.0, place=1.0, win=w, draw=0.0, loss=1 - w), opponents=[1])
        ranks.append([s.row() for s in stats])
    merged = merge_members(ranks, 2)
    assert merged[0]["reward"] == pytest.approx(3.0) and merged[0]["episodes"] == 3
    assert merged[0]["true_objective"] == pytest.approx(30.0)  # weighted like the reward
    assert merged[0]["match"]["win"] == pytest.approx(2 / 3)
    assert merged[0]["against"] == {"1": {"matches": 3, "win": pytest.approx(2 / 3), "frags": pytest.approx(3.0)}}
    assert merged[1]["reward"] is None and merged[1]["true_objective"] is None and merged[1]["episodes"] == 0
