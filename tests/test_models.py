"""Models: every conf/model file builds for the envs it is meant for, with shapes taken from the
env spec; the policy worker's one-step path and the learner's unroll agree (GRU and LSTM);
multi-head log-probs and entropies are per-head sums; measurements reach the output."""
import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT, group_conf

from nodes.envs import EnvSpec
from nodes.models.actor_critic import ActorCritic
from nodes.models.heads import ActionHeads
from nodes.models.normalisers import IMAGE_STATS_EVERY, RunningNorm, batch_moments, fold_moments

MODELS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "conf", "model", "*.yaml")))
DOOM = EnvSpec((3, 72, 128), np.uint8, (3, 3, 2, 2, 7, 11), meas_size=5)  # doom_deathmatch, heads
ATARI = EnvSpec((4, 84, 84), np.uint8, (4,))
DMLAB = EnvSpec((3, 72, 96), np.uint8, (9,))
VECTOR = EnvSpec((4,), np.float32, (2,))


def model_cfg(name, **over):
    return group_conf("model", name, **over)


def inputs(spec, b, t=None):
    lead = (b,) if t is None else (b, t)
    if spec.is_image:
        obs = torch.randint(0, 256, (*lead, *spec.obs_shape), dtype=torch.uint8)
    else:
        obs = torch.randn(*lead, *spec.obs_shape)
    return obs, torch.randn(*lead, spec.meas_size) * 50


def fold_batch(updates):
    """Fold a batch into running norms as the learner does on one node (no sum over nodes)."""
    fold_moments(updates, batch_moments(updates))


def test_the_issue_models_exist():
    assert {"simplified", "full", "impala", "mlp"} <= set(MODELS)


@pytest.mark.parametrize("name,spec", [("simplified", DOOM), ("simplified", ATARI), ("full", DOOM), ("impala", DMLAB),
                                       ("impala", ATARI), ("mlp", VECTOR), ("simplified", VECTOR)])
def test_model_builds_from_the_env_spec(name, spec):
    torch.manual_seed(0)
    model = ActorCritic(spec, model_cfg(name))
    obs, meas = inputs(spec, 3)
    logits, value, state = model.step(obs, meas, torch.zeros(3, model.state_size))
    assert logits.shape == (3, sum(spec.action_heads)) and value.shape == (3,)
    assert state.shape == (3, model.state_size)
    assert model.use_meas == (name == "full")
    if name == "impala":
        assert model.core_kind == "lstm" and model.state_size == 2 * model_cfg(name).hidden_size


@pytest.mark.parametrize("name,spec", [("simplified", DOOM), ("impala", DMLAB)])
def test_fc_layers_stack_after_the_conv_encoder_and_one_keeps_the_old_checkpoint_keys(name, spec):
    """model.fc_layers=2 stacks a second fc layer (Sample Factory 2's conv encoder has one, as the
    default here: its encoder_conv_mlp_layers=[512]); 1, the default, has the same parameter names
    as before the option existed (fc.0.*), so checkpoints load."""
    torch.manual_seed(0)
    one, two = (ActorCritic(spec, model_cfg(name, fc_size=32, fc_layers=k)) for k in (1, 2))
    linears = [[m for m in model.encoder.fc if isinstance(m, torch.nn.Linear)] for model in (one, two)]
    assert [len(x) for x in linears] == [1, 2]
    assert [(m.in_features, m.out_features) for m in linears[1]] == [(linears[0][0].in_features, 32), (32, 32)]
    assert {k for k in one.state_dict() if k.startswith("encoder.fc.")} == {"encoder.fc.0.weight", "encoder.fc.0.bias"}
    obs, meas = inputs(spec, 3)
    logits, value, _ = two.step(obs, meas, torch.zeros(3, two.state_size))
    assert logits.shape == (3, sum(spec.action_heads)) and torch.isfinite(value).all()


def test_nature_encoder_is_dqns_conv_stack_with_relu_and_the_simplified_keys():
    """model.encoder=nature: 32 8x8/4, 64 4x4/2, 64 3x3/1 with ReLU (a 7x7x64 map on Atari's 84x84),
    under the same parameter names as the simplified stack; the default conv stays 32-64-128 ELU."""
    torch.manual_seed(0)
    nature, simple = (ActorCritic(ATARI, model_cfg("convnet", encoder=e)) for e in ("nature", "conv"))
    convs = [[(m.out_channels, m.kernel_size[0], m.stride[0]) for m in model.encoder.conv
              if isinstance(m, torch.nn.Conv2d)] for model in (nature, simple)]
    assert convs == [[(32, 8, 4), (64, 4, 2), (64, 3, 1)], [(32, 8, 4), (64, 4, 2), (128, 3, 2)]]
    assert nature.encoder.fc[0].in_features == 64 * 7 * 7 and simple.encoder.fc[0].in_features == 128 * 4 * 4
    acts = [{type(m) for m in model.encoder.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.ELU))}
            for model in (nature, simple)]
    assert acts == [{torch.nn.ReLU}, {torch.nn.ELU}]
    assert nature.state_dict().keys() == simple.state_dict().keys()
    obs, meas = inputs(ATARI, 3)
    logits, value, _ = nature.step(obs, meas, torch.zeros(3, nature.state_size))
    assert logits.shape == (3, 4) and torch.isfinite(value).all()


@pytest.mark.parametrize("core,pixels", [("gru", False), ("lstm", False), ("gru", True)])
def test_unroll_equals_step_by_step(core, pixels):
    """The learner's BPTT sees exactly the behaviour policy's outputs (recurrent state reset at
    dones): the GRU unroll's hoisted input products and, on pixels, the channels-last convolutions
    included."""
    torch.manual_seed(1)
    spec = DOOM if pixels else EnvSpec((6,), np.float32, (3, 2), meas_size=0)
    model = ActorCritic(spec, model_cfg("simplified" if pixels else "mlp", fc_size=16, core=core, hidden_size=8))
    assert model.channels_last == pixels
    b, t = 4, 7
    obs, meas = inputs(spec, b, t + 1)
    dones = torch.rand(b, t) < 0.3
    state0 = torch.randn(b, model.state_size)
    logits_u, values_u = model.unroll(obs, meas, state0, dones)
    state = state0
    for i in range(t + 1):
        logits, values, state = model.step(obs[:, i], meas[:, i], state)
        assert torch.allclose(logits, logits_u[:, i], atol=1e-5) and torch.allclose(values, values_u[:, i], atol=1e-5)
        if i < t:
            state = state * (~dones[:, i:i + 1]).float()


def test_multi_head_distribution_is_a_product_of_heads():
    heads = ActionHeads((3, 2, 4))
    torch.manual_seed(2)
    logits = torch.randn(5, 9)
    actions = heads.sample(logits)
    assert actions.shape == (5, 3) and actions.dtype == torch.float32  # the buffers' dtype; exact small integers
    assert torch.equal(actions, actions.round())
    for i, n in enumerate(heads.sizes):
        assert int(actions[:, i].min()) >= 0 and int(actions[:, i].max()) < n
    parts = logits.split([3, 2, 4], -1)
    index = actions.long()
    manual = sum(torch.log_softmax(p, -1).gather(1, index[:, i:i + 1]).squeeze(1) for i, p in enumerate(parts))
    assert torch.allclose(heads.log_prob(logits, actions), manual)
    ent = sum(torch.distributions.Categorical(logits=p).entropy() for p in parts)
    assert torch.allclose(heads.log_prob_and_entropy(logits, actions)[1], ent, atol=1e-6)
    # sampling follows the probabilities of each head independently
    big = torch.tensor([[2.0, 0.0, -1.0, 0.5, -0.5, 0.0, 1.0, -2.0, 0.3]]).repeat(20000, 1)
    freq = torch.bincount(heads.sample(big)[:, 0].long(), minlength=3).float() / 20000
    assert torch.allclose(freq, torch.softmax(big[0, :3], 0), atol=0.015)


def test_full_model_output_depends_on_measurements():
    torch.manual_seed(3)
    model = ActorCritic(DOOM, model_cfg("full"))
    obs, meas = inputs(DOOM, 2)
    state = torch.zeros(2, model.state_size)
    a, _, _ = model.step(obs, meas, state)
    b, _, _ = model.step(obs, meas + 30, state)
    assert not torch.allclose(a, b)
    simplified = ActorCritic(DOOM, model_cfg("simplified"))  # ignores them
    a, _, _ = simplified.step(obs, meas, state[:, :simplified.state_size])
    b, _, _ = simplified.step(obs, meas + 30, state[:, :simplified.state_size])
    assert torch.equal(a, b)


def test_running_norm_in_float32_matches_float64_on_near_constant_pixels():
    """The moments are float32 sums about the running mean (they ride in the float32 gradient
    all-reduce). Pixels at 250 that flip to 251 one time in fifty (variance 0.0196), batches of
    1024 (128 frames from each of 8 nodes): raw float32 sums of squares lose the variance to
    cancellation (6 % off after 60 batches, 11 % with 4096-frame batches); about the running
    mean only the first batch (mean still 0) carries that error, diluted by the later ones."""
    g = torch.Generator().manual_seed(5)
    norm, seen = RunningNorm((4, 8)), []
    for _ in range(60):
        x = (250 + (torch.rand((1024, 4, 8), generator=g) < 0.02).long()).to(torch.uint8)
        seen.append(x.numpy().astype(np.float64))
        fold_batch([(norm, x)])
    data = np.concatenate(seen)
    assert int(norm.count) == len(data)
    assert np.allclose(norm.mean.numpy(), data.mean(0), rtol=0, atol=1e-4)
    assert np.allclose(norm.var.numpy(), data.var(0), rtol=1e-2, atol=0)  # measured: 0.4 % at worst


def test_pixel_statistics_come_from_every_eighth_step_and_are_layout_blind():
    torch.manual_seed(2)
    model = ActorCritic(DOOM, model_cfg("simplified", fc_size=16, hidden_size=8))
    obs, meas = inputs(DOOM, 3, 16)
    fold_batch(model.norm_updates(obs, meas))
    ref = RunningNorm(DOOM.obs_shape)
    fold_batch([(ref, obs[:, ::IMAGE_STATS_EVERY])])
    assert IMAGE_STATS_EVERY == 8 and int(model.obs_norm.count) == 3 * 2
    assert torch.equal(model.obs_norm.mean, ref.mean) and torch.equal(model.obs_norm.var, ref.var)
    # the channels-last weights hand over in logical order: a copy in the plain layout computes the same
    assert model.encoder.conv[0].weight.is_contiguous(memory_format=torch.channels_last)
    plain = ActorCritic(DOOM, model_cfg("simplified", fc_size=16, hidden_size=8))
    plain.encoder.to(memory_format=torch.contiguous_format)
    plain.channels_last = False
    plain.load_state_dict(model.state_dict())
    assert plain.encoder.conv[0].weight.is_contiguous()
    x = obs[:, 0]
    assert torch.allclose(model.step(x, meas[:, 0], torch.zeros(3, 8))[0],
                          plain.step(x.contiguous(), meas[:, 0], torch.zeros(3, 8))[0], atol=1e-5)


def test_deterministic_kernels_set_torchs_flags_without_importing_the_compiler():
    """torch.use_deterministic_algorithms would import torch._inductor (and torch._dynamo) to set
    Inductor's flag: ~2 s of every deterministic node's and policy worker's start."""
    code = ("import sys, torch\n"
            "from nodes.models.numerics import deterministic_kernels\n"
            "deterministic_kernels()\n"
            "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),"
            " 'torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)\n"
            "import torch._inductor.config as c\n"
            "print(c.deterministic)\n"
            "torch.use_deterministic_algorithms(False); deterministic_kernels()\n"  # imported: its flag is set too
            "print(c.deterministic, torch.are_deterministic_algorithms_enabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split("\n")[:3] == ["True True False False", "False", "True True"], out.stdout


def test_obs_norm_eps_bounds_how_far_a_pixel_that_barely_varies_is_magnified():
    """A pixel constant at 100 but for one frame in a thousand at 101 (std 0.03 grey levels): with
    model.obs_norm_eps=1e-5 that one-level change reaches the clip (5); at 0.65 (Sample Factory's
    1e-5 on pixels / 255) it stays near its size in grey levels (about 1.2); a pixel that varies
    widely (std ~74) is normalised alike by both."""
    x = torch.full((1000, 3, 72, 128), 100, dtype=torch.uint8)
    x[0, 0, 0, 0] = 101
    x[:, 0, 0, 1] = torch.arange(1000) % 256
    out = {}
    for eps in (1e-5, 0.65):
        model = ActorCritic(DOOM, model_cfg("simplified", fc_size=16, hidden_size=8, obs_norm_eps=eps))
        assert model.obs_norm.eps == eps
        fold_batch([(model.obs_norm, x)])
        out[eps] = model.obs_norm(x[:2]).float()
    assert out[1e-5][0, 0, 0, 0] == 5.0  # 1 / 0.03, clipped
    assert 1.0 < out[0.65][0, 0, 0, 0] < 1.4
    assert torch.allclose(out[1e-5][:, 0, 0, 1], out[0.65][:, 0, 0, 1], rtol=1e-3)


def test_orthogonal_heads_leaves_the_encoder_pytorchs_weights_with_zero_biases():
    """model.init=orthogonal_heads is Sample Factory 2.1.1's orthogonal init as it runs (its TorchScript
    encoder escapes it): the actor and critic orthogonal, every encoder layer's weights within
    PyTorch's 1/sqrt(fan_in) bound (rows of norm ~0.58) and its biases zero, the GRU PyTorch's own;
    model.init=orthogonal makes every encoder row a unit vector."""
    def build(init):
        torch.manual_seed(0)
        return ActorCritic(DOOM, model_cfg("simplified", init=init))
    model = build("orthogonal_heads")
    layers = [m for m in model.encoder.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 4  # three convolutions and the fc layer
    for layer in layers:
        w = layer.weight.detach().flatten(1)
        assert w.abs().max() <= 1 / w.shape[1] ** 0.5 and w.norm(dim=1).max() < 0.7
        assert layer.bias.abs().max() == 0
    for head in (model.actor, model.critic):
        assert torch.allclose(head.weight.norm(dim=1), torch.ones(head.out_features), atol=1e-5)
        assert head.bias.abs().max() == 0
    assert model.core.bias_ih.abs().max() > 0  # the core as PyTorch made it
    orthogonal = build("orthogonal")
    for layer in [m for m in orthogonal.encoder.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]:
        assert torch.allclose(layer.weight.detach().flatten(1).norm(dim=1), torch.ones(layer.out_channels if isinstance(
            layer, torch.nn.Conv2d) else layer.out_features), atol=1e-4)


def test_images_are_normalised_in_chunks_to_the_same_bits_in_the_layout_and_dtype_the_convs_take():
    from nodes.models.normalisers import CHUNK_ROWS, RunningNorm

    g = torch.Generator().manual_seed(0)
    norm = RunningNorm((3, 9, 11), eps=1e-5)
    norm.mean.copy_(torch.rand(3, 9, 11, generator=g) * 255)
    norm.var.copy_(torch.rand(3, 9, 11, generator=g) * 3000 + 0.01)  # some elements clip at +-5
    for rows in (3, 2 * CHUNK_ROWS + 5):  # a policy worker's few, a learner's many (a partial last chunk)
        x = torch.randint(0, 256, (rows, 3, 9, 11), dtype=torch.uint8, generator=g)
        whole = norm(x, torch.channels_last)
        got = norm.images(x)
        assert got.dtype == torch.float32 and got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got, whole)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = norm.images(x)
        assert got.is_contiguous(memory_format=torch.channels_last)
        assert got.dtype == torch.bfloat16 and torch.equal(got, whole.to(torch.bfloat16))


def test_packed_weights_give_autocasts_bits_on_any_pass_and_follow_each_refresh():
    """The policy worker's big products on weights packed once per version (nodes/models/packed.py):
    whole passes of the VizDoom model (conv encoder, fc 2304 -> 512, GRU) must equal autocast's to
    the bit at pass sizes the probe never saw; after an in-place update they are the old weights'
    (so the packs are what runs) until `refresh`; with gradients on, the layers' own forward."""
    import copy

    from nodes.models.packed import PackedWeights

    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has no bf16 in oneDNN: PackedWeights stays off (its install returns None)")
    spec = EnvSpec((3, 72, 128), np.uint8, (3,))
    torch.manual_seed(0)
    plain = ActorCritic(spec, model_cfg("simplified")).eval()
    packed = copy.deepcopy(plain)
    packs = PackedWeights.install(packed, torch.device("cpu"), "bf16")
    assert packs is not None and len(packs.linears) == 1 and len(packs.grus) == 1
    assert PackedWeights.install(copy.deepcopy(plain), torch.device("cpu"), "fp32") is None

    def passes(model, sizes=(1, 3, 8, 13)):
        torch.manual_seed(1)
        out = []
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for b in sizes:
                obs, meas = inputs(spec, b)
                out += model.step(obs, meas, torch.randn(b, model.state_size))
        return out

    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(passes(plain), passes(packed)))
        for p, q in zip(plain.parameters(), packed.parameters()):
            update = 0.01 * torch.randn_like(p)
            p.add_(update)
            q.add_(update)
        stale = passes(packed)
        assert not all(torch.equal(a, b) for a, b in zip(passes(plain), stale))
        packs.refresh()
        assert all(torch.equal(a, b) for a, b in zip(passes(plain), passes(packed)))
    with torch.enable_grad():  # a model that learns: its own forward, gradients and all
        logits = passes(packed, sizes=(4,))[0]
        assert logits.requires_grad
        logits.sum().backward()
        assert packed.core.weight_hh.grad is not None and packed.encoder.fc[0].weight.grad is not None
