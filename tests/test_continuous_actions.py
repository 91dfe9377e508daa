"""Continuous (Gaussian) actions in-process: the distribution against torch's Normal, sampling from
given uniforms, the log-std's gradient, the discrete path unchanged beside continuous dims, the
float32 buffers' round trip through the policy worker's writes, and the env wrapper's clipping."""
import numpy as np
import pytest
import torch
from helpers import compose

from nodes.envs import EnvSpec, action_converter, check_env_config, make_env
from nodes.errors import ConfigError
from nodes.models.actor_critic import ActorCritic
from nodes.models.heads import ActionHeads
from nodes.sampling.buffers import SlotBatch, allocate
from nodes.sampling.policy_worker import Inference
from nodes.sampling.rollout_worker import random_rows

MEAN = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.3, -0.7]])
LOG_STD = torch.tensor([[-0.5, 0.0, 0.7]]).expand(2, -1)
ACTIONS = torch.tensor([[0.1, -2.0, 3.5], [1.2, 0.3, -0.2]])
BOX = EnvSpec((4,), np.float32, (), action_low=(-1.0, 0.0), action_high=(1.0, 2.0))
MIXED = EnvSpec((4,), np.float32, (3, 2), action_low=(-1.0, -1.0), action_high=(1.0, 1.0))


def test_log_prob_and_entropy_are_torch_normals_summed_over_dims():
    heads = ActionHeads((), 3)
    params = torch.cat([MEAN, LOG_STD], -1)
    normal = torch.distributions.Normal(MEAN, LOG_STD.exp())
    logp, entropy = heads.log_prob_and_entropy(params, ACTIONS)
    torch.testing.assert_close(logp, normal.log_prob(ACTIONS).sum(-1))
    torch.testing.assert_close(entropy, normal.entropy().sum(-1))
    assert torch.equal(logp, heads.log_prob(params, ACTIONS))


def test_sampling_from_uniforms_is_mean_plus_std_times_ndtri_and_greedy_is_the_mean():
    heads = ActionHeads((), 3)
    params = torch.cat([MEAN, LOG_STD], -1)
    u = torch.tensor([[0.5, 0.975, 0.1], [0.0, 1.0, 0.3]])
    a = heads.sample(params, u)
    assert a.dtype == torch.float32 and a.shape == (2, 3)
    assert torch.equal(a[0], MEAN[0] + LOG_STD[0].exp() * torch.special.ndtri(u[0]))
    assert a[0, 0] == MEAN[0, 0]  # the median
    assert torch.isfinite(a).all()  # u of exactly 0 and 1 are clamped away from the infinite tails
    assert torch.equal(heads.greedy(params), MEAN)
    # without uniforms: torch's generator (the same seed, the same draws)
    torch.manual_seed(0)
    first = heads.sample(params)
    torch.manual_seed(0)
    assert torch.equal(first, heads.sample(params)) and not torch.equal(first, MEAN)


def test_mixed_heads_keep_the_discrete_path_and_add_the_gaussian_dims():
    """Discrete heads (3, 2) and 2 continuous dims: the discrete actions equal a discrete-only
    ActionHeads' on the same logits and uniforms; log-probs and entropies add up."""
    torch.manual_seed(1)
    logits, mean, log_std = torch.randn(4, 5), torch.randn(4, 2), torch.randn(4, 2) * 0.3
    u = torch.rand(4, 7)
    mixed, discrete, gaussian = ActionHeads((3, 2), 2), ActionHeads((3, 2)), ActionHeads((), 2)
    params = torch.cat([logits, mean, log_std], -1)
    a = mixed.sample(params, u)
    assert a.shape == (4, 4)
    assert torch.equal(a[:, :2], discrete.sample(logits, u[:, :5]))
    assert torch.equal(a[:, 2:], gaussian.sample(torch.cat([mean, log_std], -1), u[:, 5:]))
    g = torch.cat([mean, log_std], -1)
    torch.testing.assert_close(mixed.log_prob(params, a),
                               discrete.log_prob(logits, a[:, :2]) + gaussian.log_prob(g, a[:, 2:]))
    torch.testing.assert_close(mixed.log_prob_and_entropy(params, a)[1],
                               discrete.log_prob_and_entropy(logits, a[:, :2])[1]
                               + gaussian.log_prob_and_entropy(g, a[:, 2:])[1])
    assert torch.equal(mixed.greedy(params)[:, 2:], mean)
    assert [x.shape[-1] for x in mixed.split(params)] == [3, 2]


def test_the_log_std_is_a_parameter_the_loss_moves_and_discrete_models_have_none():
    cfg = compose("model=feedforward").model
    torch.manual_seed(0)
    model = ActorCritic(BOX, cfg)
    assert model.actor.out_features == 2 and torch.equal(model.action_log_std, torch.zeros(2))
    assert "action_log_std" in model.state_dict()  # in every checkpoint and weights hand-off
    obs = torch.randn(6, 4)
    params, _, _ = model.step(obs, torch.zeros(6, 0), torch.zeros(6, model.state_size))
    assert params.shape == (6, 4) and torch.equal(params[:, 2:], torch.zeros(6, 2))
    logp, entropy = model.heads.log_prob_and_entropy(params, torch.randn(6, 2))
    (-(logp.mean() + 0.1 * entropy.mean())).backward()
    assert model.action_log_std.grad is not None and model.action_log_std.grad.abs().min() > 0
    discrete = ActorCritic(EnvSpec((4,), np.float32, (3,)), cfg)
    assert discrete.action_log_std is None and "action_log_std" not in discrete.state_dict()
    assert discrete.actor.out_features == 3


def test_model_action_std_is_the_policys_spread_at_the_start():
    """model.action_std: the std the policy samples with before any step (Ant needs less than 1:
    docs/environments.md#mujoco), for every dim; the sampled actions' spread follows it."""
    model = ActorCritic(BOX, compose("model=feedforward", "model.action_std=0.5").model)
    assert torch.allclose(model.action_log_std.exp(), torch.full((2,), 0.5))
    params, _, _ = model.step(torch.zeros(20000, 4), torch.zeros(20000, 0), torch.zeros(20000, model.state_size))
    torch.manual_seed(0)
    actions = model.heads.sample(params)
    assert actions.std(0).tolist() == pytest.approx([0.5, 0.5], rel=0.03)


def test_the_gaussian_means_start_near_zero_and_the_logits_keep_their_spread():
    """The actor's rows for the Gaussian means start at gain 0.01 (a wide start of the means is a
    control cost Ant learned to escape by falling over); the discrete logits' rows keep gain 1."""
    torch.manual_seed(0)
    model = ActorCritic(MIXED, compose("model=feedforward").model)
    obs = torch.randn(4096, 4)
    params, _, _ = model.step(obs, torch.zeros(4096, 0), torch.zeros(4096, model.state_size))
    logits, means = params[:, :5], params[:, 5:7]
    assert means.abs().max() < 0.05 and logits.std() > 0.2


def test_model_init_torch_default_keeps_pytorchs_own_initialisation():
    """model.init=torch_default (Sample Factory's MuJoCo example): every linear layer as nn.Linear
    made it (uniform within 1/sqrt(fan_in), biases too), so the means start spread as its do;
    orthogonal: zero biases and the means' rows at gain 0.01."""
    def linears(init):
        torch.manual_seed(0)
        model = ActorCritic(BOX, compose("model=feedforward", f"model.init={init}").model)
        return model, [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    model, layers = linears("torch_default")
    assert len(layers) >= 3
    for layer in layers:
        bound = 1 / layer.in_features ** 0.5
        assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
        assert layer.bias.abs().max() > 0.1 * bound
    obs = torch.randn(4096, 4)
    params, _, _ = model.step(obs, torch.zeros(4096, 0), torch.zeros(4096, model.state_size))
    assert params[:, :2].std() > 0.05  # state-dependent means, not all near 0
    _, layers = linears("orthogonal")
    assert all(layer.bias.abs().max() == 0 for layer in layers)


@pytest.mark.parametrize("spec", [BOX, MIXED], ids=["box", "mixed"])
@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
def test_policy_worker_writes_actions_the_learner_reads_back_unchanged(spec, staged):
    """Deterministic mode on a pure Box and a mixed spec: the policy worker's write (directly, and
    through the staging rows a GPU uses) holds the action its uniforms decide, float32; a learner
    batch copied out holds the same, and its log-prob is the one the worker stored."""
    cfg = compose("env=gym", "model=feedforward", "sampler.num_workers=1", "sampler.envs_per_worker=4",
                  "sampler.rollout=3", "sampler.mode=deterministic")
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()
    buffers = allocate(spec, cfg.sampler, model.state_size)
    assert buffers.actions.dtype == torch.float32 and buffers.actions.shape[-1] == spec.action_width
    assert buffers.uniforms.shape[-1] == spec.uniform_width
    g = torch.Generator().manual_seed(3)
    buffers.obs.copy_(torch.randn(buffers.obs.shape, generator=g))
    buffers.uniforms.copy_(torch.rand(buffers.uniforms.shape, generator=g))
    buffers.env_slot.copy_(torch.tensor([0, 1, 2, 3]))
    for t in range(3):
        buffers.env_t.fill_(t)
        Inference(model, buffers, torch.device("cpu"), staged=staged)(torch.arange(4), version=1)
    with torch.no_grad():
        params, _ = model.unroll(buffers.obs[:4], buffers.meas[:4], buffers.h0[:4], buffers.dones[:4])
        expected = model.heads.sample(params[:, :-1], buffers.uniforms[:4])
    torch.testing.assert_close(buffers.actions[:4], expected)
    batch = SlotBatch.copy_slots(buffers, [0, 1, 2, 3])
    assert torch.equal(batch.actions, buffers.actions[:4])
    with torch.no_grad():
        torch.testing.assert_close(model.heads.log_prob(params[:, :-1], batch.actions), batch.logp)


def test_env_actions_and_random_rows():
    box_row = np.array([0.25, 3.0], np.float32)
    a = action_converter(BOX)(box_row)
    assert a.dtype == np.float32 and np.array_equal(a, box_row) and not np.shares_memory(a, box_row)
    assert action_converter(EnvSpec((4,), np.float32, (3,)))(np.array([2.0], np.float32)) == 2
    heads = action_converter(EnvSpec((4,), np.float32, (3, 2)))(np.array([2.0, 1.0], np.float32))
    assert heads.dtype == np.int64 and heads.tolist() == [2, 1]
    ints, dims = action_converter(MIXED)(np.array([2.0, 1.0, 0.5, -3.0], np.float32))
    assert ints.tolist() == [2, 1] and dims.tolist() == [0.5, -3.0]
    rows = random_rows(MIXED, np.random.default_rng(0), 500)
    assert rows.shape == (500, 4) and set(rows[:, 0]) == {0, 1, 2} and set(rows[:, 1]) == {0, 1}
    assert rows[:, 2:].min() >= -1 and rows[:, 2:].max() <= 1 and rows[:, 2:].std() > 0.5
    box = random_rows(BOX, np.random.default_rng(0), 500)
    assert box[:, 0].min() >= -1 and box[:, 1].min() >= 0 and box[:, 1].max() <= 2 and box[:, 1].max() > 1.9


def test_the_wrapper_clips_to_the_box_and_keeps_the_policys_sample():
    cfg = compose("env=gym", "env.id=tests.envs:BoxRecorder-v0").env
    env = make_env(cfg, seed=0)
    assert env.spec.action_low == (-1.0, 0.0) and env.spec.action_high == (1.0, 2.0)
    env.reset()
    action = np.array([5.0, -0.5], np.float32)
    env.step(action)
    assert env.env.unwrapped.last_action.tolist() == [1.0, 0.0]
    assert action.tolist() == [5.0, -0.5]  # clipped into a copy: the buffer row keeps the sample
    env.close()
    # env.clip_actions=false (env=mujoco*: MuJoCo clamps its controls and charges the control cost
    # on what it was given): the sample reaches the env as drawn
    assert compose("env=mujoco_ant").env.clip_actions is False
    cfg = compose("env=gym", "env.id=tests.envs:BoxRecorder-v0", "env.clip_actions=false").env
    env = make_env(cfg, seed=0)
    env.reset()
    env.step(action)
    assert env.env.unwrapped.last_action.tolist() == [5.0, -0.5]
    env.close()


def test_rescaled_actions_are_in_units_of_the_bounds_before_and_after_clipping():
    # env.rescale_actions=true: the policy acts in -1..1 per dim, mapped onto the Box's own bounds
    # (gymnasium's RescaleAction); the spec shows the policy's units, clipping clips in them
    cfg = compose("env=gym", "env.id=tests.envs:BoxRecorder-v0", "env.rescale_actions=true").env
    env = make_env(cfg, seed=0)
    assert env.spec.action_low == (-1.0, -1.0) and env.spec.action_high == (1.0, 1.0)
    env.reset()
    env.step(np.array([0.5, 0.5], np.float32))
    assert env.env.unwrapped.last_action.tolist() == [0.5, 1.5]  # [-1, 1] as is, [0, 2] from its middle
    env.step(np.array([5.0, -5.0], np.float32))
    assert env.env.unwrapped.last_action.tolist() == [1.0, 0.0]  # clipped to -1..1, then mapped
    env.close()
    cfg = compose("env=gym", "env.id=tests.envs:BoxRecorder-v0", "env.rescale_actions=true",
                  "env.clip_actions=false").env
    env = make_env(cfg, seed=0)
    env.reset()
    env.step(np.array([5.0, -5.0], np.float32))
    assert env.env.unwrapped.last_action.tolist() == [5.0, -4.0]  # the same line, past the bounds
    env.close()


def test_rescaled_actions_reach_every_box_of_a_tuple():
    # env.rescale_actions=true with a Tuple action: its Box, too, is in units of the bounds (-1..1 mapped
    # onto 0..10), the Discrete part as it was; the policy's -1..1 spans the Box (it was left out:
    # 1.0 reached the env as 1.0, a tenth of the way)
    cfg = compose("env=gym", "env.id=tests.envs:TupleBoxRecorder-v0", "env.rescale_actions=true").env
    env = make_env(cfg, seed=0)
    assert env.spec.action_heads == (2,) and env.spec.action_low == (-1.0,) and env.spec.action_high == (1.0,)
    env.reset()
    got = []
    for policy in (-1.0, 0.0, 0.5, 1.0, 3.0):  # 3.0: clipped to 1 (env.clip_actions), then mapped
        env.step((np.array([1]), np.array([policy], np.float32)))
        choice, amount = env.env.unwrapped.last_action
        assert choice == 1 and env.env.unwrapped.action_space[1].contains(amount), amount
        got.append(float(amount[0]))
    assert got == [0.0, 5.0, 7.5, 10.0, 10.0]
    env.close()


@pytest.mark.parametrize("env_id,message", [
    ("MultiBinaryActions", "env=gym supports Discrete, MultiDiscrete, flat Box action spaces and Tuples of them, "
                           "env.id 'tests.envs:MultiBinaryActions-v0' has MultiBinary(3)"),
    ("SquareBoxActions", "env=gym supports Discrete, MultiDiscrete, flat Box action spaces and Tuples of them, "
                         "env.id 'tests.envs:SquareBoxActions-v0' has Box(-1.0, 1.0, (2, 2), float32)"),
    ("UnboundedBoxActions", "env=gym needs finite Box action bounds"),
])
def test_unsupported_action_spaces_are_refused_in_one_line(env_id, message):
    with pytest.raises(ConfigError) as err:
        check_env_config(compose("env=gym", f"env.id=tests.envs:{env_id}-v0").env)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_env_mujoco_without_a_task_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^env=mujoco needs env.id, e.g. env.id=HalfCheetah-v5 "
                                          r"\(or env.make=pkg.module:function\)$"):
        check_env_config(compose("env=mujoco").env)


def test_the_gym_wrapper_tells_a_time_limit_from_a_termination():
    """Pendulum-v1 never terminates: its 200-step limit ends the episode as truncated; CartPole's
    fall is a termination (no "truncated")."""
    pendulum = make_env(compose("env=gym", "env.id=Pendulum-v1").env, seed=0)
    pendulum.reset()
    infos = [pendulum.step(np.zeros(1, np.float32)) for _ in range(200)]
    assert [i for i, (_, _, done, _) in enumerate(infos) if done] == [199]
    assert infos[-1][3].get("truncated") is True and not any(info for _, _, _, info in infos[:-1])
    cartpole = make_env(compose("env=gym", "env.id=CartPole-v1").env, seed=0)
    cartpole.reset()
    done, info = False, None
    while not done:
        _, _, done, info = cartpole.step(0)  # always left: it falls within a few dozen steps
    assert not info.get("truncated", False)
    pendulum.close()
    cartpole.close()
