"""V-trace, GAE and PPO clipping against small cases worked out by hand."""
import math

import pytest
import torch

from nodes.learning import losses


def test_vtrace_hand_computed_off_policy():
    # B=1, T=2, gamma=0.9; rho = [2.0, 0.5] -> clipped rho = c = [1.0, 0.5]
    rewards = torch.tensor([[1.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 2.0]])
    dones = torch.tensor([[False, False]])
    log_rhos = torch.log(torch.tensor([[2.0, 0.5]]))
    vs, adv = losses.vtrace(rewards, values, dones, log_rhos, gamma=0.9)
    # delta_1 = 0.5 * (2 + 0.9*2 - 1) = 1.4           -> vs_1 = 1 + 1.4 = 2.4
    # delta_0 = 1.0 * (1 + 0.9*1 - 0.5) = 1.4
    # vs_0 - V_0 = delta_0 + gamma * c_0 * (vs_1 - V_1) = 1.4 + 0.9 * 1.4 = 2.66 -> vs_0 = 3.16
    assert vs.tolist()[0] == pytest.approx([3.16, 2.4])
    # adv_0 = rho_0 (r_0 + gamma vs_1 - V_0) = 1 + 2.16 - 0.5 = 2.66; adv_1 = 0.5 (2 + 1.8 - 1) = 1.4
    assert adv.tolist()[0] == pytest.approx([2.66, 1.4])


def test_vtrace_done_cuts_bootstrap():
    rewards = torch.tensor([[1.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 2.0]])
    dones = torch.tensor([[True, False]])
    vs, adv = losses.vtrace(rewards, values, dones, torch.zeros(1, 2), gamma=0.9)
    # episode ended at step 0: vs_0 = r_0 = 1; vs_1 = 2 + 0.9 * 2 = 3.8 (on-policy n-step return)
    assert vs.tolist()[0] == pytest.approx([1.0, 3.8])
    assert adv.tolist()[0] == pytest.approx([0.5, 2.8])


def test_vtrace_on_policy_equals_discounted_return():
    torch.manual_seed(0)
    r = torch.randn(3, 5)
    v = torch.randn(3, 6)
    vs, _ = losses.vtrace(r, v, torch.zeros(3, 5, dtype=torch.bool), torch.zeros(3, 5), gamma=0.95)
    ret = v[:, -1].clone()
    for t in reversed(range(5)):
        ret = r[:, t] + 0.95 * ret
        if t == 0:
            assert torch.allclose(vs[:, 0], ret, atol=1e-5)


def test_gae_lambda_one_is_monte_carlo_advantage():
    r = torch.tensor([[1.0, 1.0, 1.0]])
    v = torch.tensor([[0.0, 0.0, 0.0, 10.0]])
    ret, adv = losses.gae(r, v, torch.tensor([[False, True, False]]), gamma=0.5, lam=1.0)
    # done after step 1: returns 1 + 0.5*1 = 1.5, 1, then 1 + 0.5*10 = 6
    assert ret.tolist()[0] == pytest.approx([1.5, 1.0, 6.0])
    assert adv.tolist()[0] == pytest.approx([1.5, 1.0, 6.0])


def test_ppo_clipping_value_and_gradient():
    ratio = torch.tensor([0.5, 1.5, 1.05], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss = losses.ppo_surrogate(ratio, adv, clip_ratio=0.1)
    # min(0.5, 0.9) = 0.5; min(1.5, 1.1) = 1.1; min(-1.05, -1.05) = -1.05
    assert loss.item() == pytest.approx(-(0.5 + 1.1 - 1.05) / 3)
    loss.backward()
    # the clipped term (ratio 1.5 above 1 + eps with a positive advantage) passes no gradient
    assert ratio.grad.tolist() == pytest.approx([-1 / 3, 0.0, 1 / 3])
    assert not math.isnan(loss.item())


def test_clipped_value_loss_takes_the_larger_error_and_stops_a_runaway_value():
    old = torch.tensor([1.0, 1.0, 1.0])
    targets = torch.tensor([3.0, 3.0, 0.0])
    values = torch.tensor([1.1, 2.0, 2.0], requires_grad=True)
    plain = losses.value_loss(values, targets, old, clip=0.0)
    assert plain.item() == pytest.approx(0.5 * (1.9 ** 2 + 1.0 + 4.0) / 3)
    clipped = losses.value_loss(values, targets, old, clip=0.2)
    # inside the clip (1.1): the plain error; moved 1.0 towards its target: clipped at 1.2, error 1.8;
    # moved 1.0 away from its target: the plain error (2.0) is already the larger one
    assert clipped.item() == pytest.approx(0.5 * (1.9 ** 2 + 1.8 ** 2 + 2.0 ** 2) / 3)
    clipped.backward()
    assert values.grad[1] == 0  # beyond the clip towards the target: no gradient pushes it further
    assert values.grad[0] != 0 and values.grad[2] != 0


def test_symmetric_kl_to_uniform_is_zero_at_uniform_and_grows_as_a_head_collapses():
    uniform = [torch.log_softmax(torch.zeros(2, 3), -1), torch.log_softmax(torch.zeros(2, 5), -1)]
    assert torch.allclose(losses.symmetric_kl_to_uniform(uniform), torch.zeros(2), atol=1e-6)
    values = []
    for sharpness in (0.5, 2.0, 8.0):
        logp = torch.log_softmax(torch.tensor([[sharpness, 0.0, 0.0]]), -1)
        got = losses.symmetric_kl_to_uniform([logp])
        assert got.item() == pytest.approx(sample_factory_symmetric_kl(logp).item(), rel=1e-5)
        values.append(got.item())
    assert values == sorted(values) and values[0] > 0


def sample_factory_symmetric_kl(logp):
    """Sample Factory 2.1.1's symmetric_kl_with_uniform_prior, written out from its definition:
    0.5 x (KL(pi || U) + KL(U || pi)) with U = 1/n."""
    n = logp.shape[-1]
    p, log_u = logp.exp(), math.log(1.0 / n)
    return 0.5 * ((p * (logp - log_u)).sum(-1) + ((1.0 / n) * (log_u - logp)).sum(-1))


def test_exploration_loss_equals_sample_factorys_on_a_fixed_input():
    """Two heads (3 and 5 actions), one with a nearly dead action: the term and its gradient equal
    Sample Factory's (mean over the batch, capped at 30); the dead action's logit gets a gradient
    that revives it (a floor on its log-prob zeroed it)."""
    torch.manual_seed(3)
    logits = torch.randn(4, 8) * 2
    logits[:, 1] = -40.0  # head 0's second action: no chance
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    ours = losses.exploration_term(losses.symmetric_kl_to_uniform(
        [torch.log_softmax(a[:, :3], -1), torch.log_softmax(a[:, 3:], -1)]).mean())
    theirs = (sample_factory_symmetric_kl(torch.log_softmax(b[:, :3], -1))
              + sample_factory_symmetric_kl(torch.log_softmax(b[:, 3:], -1))).mean().clamp(max=30)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    ours.backward()
    theirs.backward()
    assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-8)
    assert (a.grad[:, 1] < 0).all()  # descending the loss raises the dead action's logit
    big = torch.tensor(45.0, requires_grad=True)
    capped = losses.exploration_term(big)
    capped.backward()
    assert capped.item() == 30.0 and big.grad.item() == 0.0  # Sample Factory's cap
    assert losses.exploration_term(torch.tensor(float("nan"))).item() == 0.0


def test_learner_uses_the_configured_value_and_exploration_losses():
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.sampling.buffers import SlotBatch

    spec = EnvSpec((4,), np.float32, (3, 2))
    g = torch.Generator().manual_seed(0)
    batch = SlotBatch(obs=torch.randn(4, 6, 4, generator=g), meas=torch.zeros(4, 6, 0),
                      actions=torch.randint(0, 2, (4, 5, 2), generator=g), logp=torch.full((4, 5), -1.8),
                      values=torch.randn(4, 5, generator=g), rewards=torch.randn(4, 5, generator=g),
                      dones=torch.zeros(4, 5, dtype=torch.bool), versions=torch.zeros(4, 5, dtype=torch.int64),
                      h0=torch.zeros(4, 8))
    parts = {}
    plain = ["algo.value_clip=0", "algo.exploration_loss=entropy", "algo.normalize_returns=false"]
    variants = (("plain", []), ("clip", ["algo.value_clip=0.05"]), ("kl", ["algo.exploration_loss=symmetric_kl"]))
    for name, over in variants:
        cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", *plain, *over)
        torch.manual_seed(0)
        parts[name] = {k: v.item() for k, v in Learner(ActorCritic(spec, cfg.model), cfg.algo).loss(batch).items()}
    d, c, k = parts["plain"], parts["clip"], parts["kl"]
    assert c["value_loss"] > d["value_loss"] and c["policy_loss"] == d["policy_loss"]  # clipping can only add error
    assert k["value_loss"] == d["value_loss"] and k["entropy"] == d["entropy"] and k["loss"] != d["loss"]


def test_normalized_returns_the_critic_learns_targets_in_their_std_and_the_moments_persist():
    """algo.normalize_returns: rewards of scale 100 (doom_basic's, unscaled). The running moments
    follow the value targets; the critic's outputs are scaled back for the targets, so the same
    critic output means 100x more reward once the std is 100; a checkpoint carries the moments."""
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.sampling.buffers import SlotBatch

    spec = EnvSpec((4,), np.float32, (3,))
    g = torch.Generator().manual_seed(0)
    batch = SlotBatch(obs=torch.randn(8, 6, 4, generator=g), meas=torch.zeros(8, 6, 0),
                      actions=torch.randint(0, 3, (8, 5, 1), generator=g), logp=torch.full((8, 5), -1.1),
                      values=torch.zeros(8, 5), rewards=100 + 30 * torch.randn(8, 5, generator=g),
                      dones=torch.ones(8, 5, dtype=torch.bool), versions=torch.zeros(8, 5, dtype=torch.int64),
                      h0=torch.zeros(8, 8))
    cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", "algo.normalize_returns=true",
                  "algo.vtrace=false")
    torch.manual_seed(0)
    learner = Learner(ActorCritic(spec, cfg.model), cfg.algo)
    plain = Learner(ActorCritic(spec, compose("env=gym", "model.fc_size=16", "model.hidden_size=8").model),
                    compose("env=gym", "algo.normalize_returns=false").algo)
    assert plain.returns is None and "returns" not in plain.state_dict()
    for _ in range(3):
        learner.train_step(batch)
    # every step ends its episode: GAE's targets are the rewards themselves
    r = batch.rewards.double()
    assert learner.returns.mean.item() == pytest.approx(r.mean().item(), rel=1e-4)
    assert learner.returns.var.item() == pytest.approx(r.var(unbiased=False).item(), rel=1e-3)
    # bootstrapped from the critic's output in reward units: the last target is r + gamma x mean + std x output
    fields = {k: getattr(batch, k) for k in SlotBatch.FIELDS}
    going_on = SlotBatch(**{**fields, "dones": torch.zeros(8, 5, dtype=torch.bool)})
    learner.loss(going_on)
    with torch.no_grad():
        _, out = learner.model.unroll(batch.obs, batch.meas, batch.h0, going_on.dones)
    boot = learner.returns.mean + learner.returns.var.add(1e-5).sqrt() * out[:, -1]
    assert torch.allclose(learner._targets[:, -1], batch.rewards[:, -1] + cfg.algo.gamma * boot, rtol=1e-4)
    # the value loss sees normalised targets: of order 1, not of order 100^2
    assert learner.loss(batch)["value_loss"].item() < 10
    # the moments travel with the checkpoint
    other = Learner(ActorCritic(spec, cfg.model), cfg.algo)
    other.load_state_dict(learner.state_dict())
    assert torch.equal(other.returns.mean, learner.returns.mean) and torch.equal(other.returns.var, learner.returns.var)


def test_every_running_norms_moments_ride_in_the_gradient_all_reduce():
    """The observation, measurement and return moments go over the nodes in the gradient's
    all-reduce (a collective of their own would cost the ring's whole latency at scale), and each
    norm ends as if updated on its own: a peer that doubles what it sums (as two identical nodes
    would) gives the same means and variances, with the counts doubled."""
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.run.peers import Solo
    from nodes.sampling.buffers import SlotBatch

    class TwoAlike(Solo):
        calls = 0

        def reduce_gradients(self, model, num_samples, vote=0, sums=None, member=0):
            TwoAlike.calls += 1
            sums.mul_(2)
            return 2 * num_samples, vote

        def all_sum(self, tensor):
            raise AssertionError("the learner called a collective of its own")

    spec = EnvSpec((3, 72, 128), np.uint8, (3,), 2)  # pixels and measurements (model=full): three norms
    g = torch.Generator().manual_seed(0)
    batch = SlotBatch(obs=torch.randint(0, 256, (8, 6, 3, 72, 128), dtype=torch.uint8, generator=g),
                      meas=torch.randn(8, 6, 2, generator=g),
                      actions=torch.randint(0, 3, (8, 5, 1), generator=g), logp=torch.full((8, 5), -1.1),
                      values=torch.zeros(8, 5), rewards=torch.randn(8, 5, generator=g),
                      dones=torch.zeros(8, 5, dtype=torch.bool), versions=torch.zeros(8, 5, dtype=torch.int64),
                      h0=torch.zeros(8, 8))
    cfg = compose("model=full", "model.fc_size=16", "model.hidden_size=8", "algo.normalize_returns=true")
    learners = []
    for peers in (Solo(), TwoAlike()):
        torch.manual_seed(0)
        learners.append(Learner(ActorCritic(spec, cfg.model), cfg.algo, peers))
        learners[-1].train_step(batch)
    solo, two = learners
    assert TwoAlike.calls == 1
    assert two.model.use_meas
    for a, b in ((solo.model.obs_norm, two.model.obs_norm), (solo.model.meas_norm, two.model.meas_norm),
                 (solo.returns, two.returns)):
        assert int(b.count) == 2 * int(a.count) > 0
        assert torch.allclose(a.mean, b.mean) and torch.allclose(a.var, b.var)


@pytest.mark.parametrize("vtrace", [False, True])
def test_a_time_limit_bootstraps_from_the_value_where_the_episode_was_cut(vtrace):
    """algo.value_bootstrap: a step whose episode ended by a time limit (timeouts) trains as if its
    reward were r + gamma x V(behaviour) there; a termination, or value_bootstrap=false, does not."""
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.sampling.buffers import SlotBatch

    spec = EnvSpec((4,), np.float32, (3,))
    g = torch.Generator().manual_seed(0)
    dones = torch.zeros(4, 5, dtype=torch.bool)
    dones[:, 2] = True
    timeouts = torch.zeros(4, 5, dtype=torch.bool)
    timeouts[:2, 2] = True  # trajectories 0 and 1 were cut by a time limit, 2 and 3 terminated
    fields = dict(obs=torch.randn(4, 6, 4, generator=g), meas=torch.zeros(4, 6, 0),
                  actions=torch.randint(0, 3, (4, 5, 1), generator=g), logp=torch.full((4, 5), -1.1),
                  values=torch.randn(4, 5, generator=g), rewards=torch.randn(4, 5, generator=g), dones=dones,
                  versions=torch.zeros(4, 5, dtype=torch.int64), h0=torch.zeros(4, 8))
    overrides = ("env=gym", "model.fc_size=16", "model.hidden_size=8", "algo.normalize_returns=false",
                 f"algo.vtrace={str(vtrace).lower()}")

    def targets(value_bootstrap, **changed):
        cfg = compose(*overrides, f"algo.value_bootstrap={value_bootstrap}")
        torch.manual_seed(0)
        learner = Learner(ActorCritic(spec, cfg.model), cfg.algo)
        learner.loss(SlotBatch(**{**fields, **changed}))
        return learner._targets

    gamma = compose(*overrides).algo.gamma
    bumped = fields["rewards"] + gamma * fields["values"] * timeouts
    assert torch.allclose(targets("true", timeouts=timeouts), targets("false", rewards=bumped))
    assert not torch.allclose(targets("true", timeouts=timeouts), targets("true"))
    assert torch.equal(targets("false", timeouts=timeouts), targets("false"))


def test_the_kl_estimate_is_the_kl_in_the_mean_and_its_gradient_too():
    """kl_to_behaviour on samples of the behaviour policy: its mean approaches KL(behaviour ||
    current) and the gradient of its mean that of the KL (two Gaussians, many samples)."""
    from nodes.learning.losses import kl_to_behaviour

    g = torch.Generator().manual_seed(0)
    old = torch.distributions.Normal(0.0, 1.0)
    mu = torch.tensor(0.3, requires_grad=True)
    x = torch.randn(400_000, generator=g)  # samples of the behaviour policy, N(0, 1)
    new = torch.distributions.Normal(mu, 1.2)
    estimate = kl_to_behaviour(new.log_prob(x) - old.log_prob(x)).mean()
    exact = torch.distributions.kl_divergence(old, new)
    assert estimate.item() == pytest.approx(exact.item(), rel=0.02)
    (g_est,) = torch.autograd.grad(estimate, mu)
    (g_exact,) = torch.autograd.grad(exact, mu)
    assert g_est.item() == pytest.approx(g_exact.item(), rel=0.03)
    assert (kl_to_behaviour(torch.linspace(-3, 3, 61)) >= 0).all()  # never negative, 0 at equal policies
    assert kl_to_behaviour(torch.zeros(1)).item() == 0.0


def test_kl_coeff_adds_its_share_of_the_logged_kl_to_the_loss():
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.sampling.buffers import SlotBatch

    spec = EnvSpec((4,), np.float32, (), action_low=(-1.0,), action_high=(1.0,))  # one Gaussian dim
    g = torch.Generator().manual_seed(0)
    batch = SlotBatch(obs=torch.randn(4, 6, 4, generator=g), meas=torch.zeros(4, 6, 0),
                      actions=torch.randn(4, 5, 1, generator=g), logp=torch.full((4, 5), -1.5),
                      values=torch.zeros(4, 5), rewards=torch.randn(4, 5, generator=g),
                      dones=torch.zeros(4, 5, dtype=torch.bool), versions=torch.zeros(4, 5, dtype=torch.int64),
                      h0=torch.zeros(4, 1))
    parts = {}
    for coeff in (0.0, 0.5):
        cfg = compose("env=gym", "model=feedforward", f"algo.kl_coeff={coeff}")
        torch.manual_seed(0)
        parts[coeff] = Learner(ActorCritic(spec, cfg.model), cfg.algo).loss(batch)
    assert parts[0.0]["kl"].item() > 0
    assert (parts[0.5]["loss"] - parts[0.0]["loss"]).item() == pytest.approx(0.5 * parts[0.0]["kl"].item(), rel=1e-5)


def test_with_kl_coeff_0_an_overflowing_kl_leaves_the_gradients_finite():
    """A behaviour log-prob far below the learner's (a stale or corrupt sample): expm1 of the log
    ratio overflows. With algo.kl_coeff=0 (the default) the term is logged, out of the graph; it was
    in it, and 0 x inf made every gradient NaN. (With PPO clipping the ratio itself overflows at
    the same point, and the clipped surrogate's gradient is NaN too: the plain policy gradient,
    algo.ppo_clip=false, is where the KL term alone broke the step.)"""
    import numpy as np
    from helpers import compose

    from nodes.envs import EnvSpec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.sampling.buffers import SlotBatch

    spec = EnvSpec((4,), np.float32, (3,))
    g = torch.Generator().manual_seed(0)
    logp = torch.full((4, 5), -1.1)
    logp[0, 0] = -200.0  # log ratio ~ +199: expm1 overflows float32
    batch = SlotBatch(obs=torch.randn(4, 6, 4, generator=g), meas=torch.zeros(4, 6, 0),
                      actions=torch.randint(0, 3, (4, 5, 1), generator=g).float(), logp=logp,
                      values=torch.zeros(4, 5), rewards=torch.randn(4, 5, generator=g),
                      dones=torch.zeros(4, 5, dtype=torch.bool), versions=torch.zeros(4, 5, dtype=torch.int64),
                      h0=torch.zeros(4, 8))
    cfg = compose("env=gym", "model.fc_size=16", "model.hidden_size=8", "algo.kl_coeff=0", "algo.ppo_clip=false")
    torch.manual_seed(0)
    learner = Learner(ActorCritic(spec, cfg.model), cfg.algo)
    parts = learner.loss(batch)
    assert not torch.isfinite(parts["kl"])  # logged as it is
    parts["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in learner.model.parameters())
