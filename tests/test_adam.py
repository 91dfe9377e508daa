"""nodes.learning.adam.Adam against torch.optim.Adam: the same bits step after step, state_dicts that load
into each other, and no torch._dynamo import (the reason it exists)."""
import copy
import subprocess
import sys

import torch

from nodes.learning.adam import Adam


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ELU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 5))


def _steps(model, opt, n, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(4, 3, 8, 8, generator=g)
        opt.zero_grad(set_to_none=False)
        model(x).pow(2).mean().backward()
        opt.step()


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_each_step_gives_torch_adams_bits():
    ours, theirs = _model(0), _model(0)
    kw = dict(lr=3e-3, betas=(0.9, 0.99), eps=1e-5)
    a, b = Adam(ours.parameters(), **kw), torch.optim.Adam(theirs.parameters(), **kw)
    for seed in range(5):
        _steps(ours, a, 3, seed)
        _steps(theirs, b, 3, seed)
        assert torch.equal(_flat(ours), _flat(theirs))
    assert not torch.equal(_flat(ours), _flat(_model(0)))  # it moved
    a.param_groups[0]["lr"] = b.param_groups[0]["lr"] = 1e-4  # PBT sets the lr this way
    _steps(ours, a, 2, 9)
    _steps(theirs, b, 2, 9)
    assert torch.equal(_flat(ours), _flat(theirs))


def test_state_dicts_load_into_each_other_and_go_on_alike():
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    src = _model(1)
    ours = Adam(src.parameters(), **kw)
    _steps(src, ours, 4, 0)
    # ours -> torch, and torch -> ours (a checkpoint moving between a CPU and a CUDA learner)
    m1, m2 = _model(2), _model(2)
    m1.load_state_dict(src.state_dict())
    m2.load_state_dict(src.state_dict())
    theirs = torch.optim.Adam(m1.parameters(), **kw)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))  # as from a file (torch's load shares tensors)
    again = Adam(m2.parameters(), lr=0.5, betas=(0.1, 0.2), eps=1.0)
    again.load_state_dict(theirs.state_dict())
    assert again.param_groups[0]["lr"] == 1e-3 and again.param_groups[0]["betas"] == (0.9, 0.999)
    _steps(src, ours, 3, 1)
    _steps(m1, theirs, 3, 1)
    _steps(m2, again, 3, 1)
    assert torch.equal(_flat(src), _flat(m1)) and torch.equal(_flat(src), _flat(m2))
    assert ours.state_dict()["state"][0]["step"] == 7
    # a loaded state is a copy: stepping one optimizer leaves the other's moments alone
    assert all(again.state[p]["exp_avg"].data_ptr() != ours.state[q]["exp_avg"].data_ptr()
               for p, q in zip(again.params, ours.params))


def test_a_learner_on_cpu_never_imports_dynamo():
    code = ("import sys, torch\n"
            "from nodes.learning.learner import make_optimizer\n"
            "from nodes.config.agent import AlgoConfig\n"
            "m = torch.nn.Linear(3, 2)\n"
            "opt = make_optimizer(m, AlgoConfig())\n"
            "m(torch.ones(3)).sum().backward(); opt.step()\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_mujoco_learner_with_either_adam_takes_the_same_steps():
    """The real Learner of the MuJoCo preset (the Gaussian head's state-independent log-std, an
    iteration of several epochs x minibatches, gradient clipping): the same parameters, bit for bit,
    with torch.optim.Adam as with ours (a suspicion once, from a single pair of noisy HalfCheetah runs)."""
    from helpers import compose

    from launch.tools.scaling_harness import batch_shape, synthetic_batch
    from nodes.envs import env_spec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic

    cfg = compose("env=mujoco_halfcheetah", "sampler.num_workers=2", "sampler.envs_per_worker=4")
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    ours = Learner(ActorCritic(spec, cfg.model), cfg.algo, precision="fp32")
    theirs = Learner(copy.deepcopy(ours.model), cfg.algo, precision="fp32")
    c = cfg.algo
    theirs.optimizer = torch.optim.Adam(theirs.model.parameters(), lr=c.lr, eps=c.adam_eps,
                                        betas=(c.adam_beta1, c.adam_beta2))
    assert isinstance(ours.optimizer, Adam) and spec.continuous and cfg.algo.epochs * cfg.algo.minibatches > 1
    batch = synthetic_batch(spec, ours.model.state_size, *batch_shape(cfg), seed=0)
    for _ in range(3):
        assert ours.train_step(batch)["loss"] == theirs.train_step(batch)["loss"]
    assert torch.equal(_flat(ours.model), _flat(theirs.model))
    assert not torch.equal(ours.model.action_log_std, torch.zeros_like(ours.model.action_log_std))
