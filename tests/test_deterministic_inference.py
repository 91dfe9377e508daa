"""sampler.mode=deterministic, the policy worker's half: an env's action, log-prob, value and new
hidden state must not depend on which other envs share its inference request (how requests are
batched depends on timing and on the layout), and its action is decided by the env's own
uniforms, not by the policy worker's generator."""
from __future__ import annotations

import torch

from nodes.envs import env_spec
from nodes.models.actor_critic import ActorCritic
from nodes.sampling.buffers import allocate
from nodes.sampling.policy_worker import Inference
from tests.helpers import compose

OUTPUTS = ("actions", "logp", "values", "env_h", "h0", "versions")


def _served(cfg, spec, model, requests, torch_seed):
    buffers = allocate(spec, cfg.sampler, model.state_size)
    g = torch.Generator().manual_seed(1)
    buffers.obs.copy_(torch.randint(0, 255, buffers.obs.shape, generator=g).to(buffers.obs.dtype))
    buffers.env_h.copy_(torch.randn(buffers.env_h.shape, generator=g))
    buffers.uniforms.copy_(torch.rand(buffers.uniforms.shape, generator=g))
    n = len(buffers.env_slot)
    buffers.env_slot.copy_(torch.arange(n))
    buffers.env_t.copy_(torch.arange(n) % cfg.sampler.rollout)
    torch.manual_seed(torch_seed)  # the worker's own generator: must play no part
    infer = Inference(model, buffers, torch.device("cpu"), staged=False, per_env=True)
    for ids in requests:
        infer(torch.tensor(ids), version=3)
    return buffers


def test_per_env_inference_does_not_depend_on_the_batching_of_requests():
    cfg = compose("sampler.mode=deterministic", "sampler.num_workers=1", "sampler.envs_per_worker=6",
                  "sampler.rollout=4")
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()  # the default doom_basic model: conv, GRU 512
    assert cfg.sampler.mode == "deterministic" and spec.num_heads == 1
    one_batch = _served(cfg, spec, model, [[0, 1, 2, 3, 4, 5]], torch_seed=0)
    assert one_batch.uniforms.shape[-1] == sum(spec.action_heads)
    mixed = _served(cfg, spec, model, [[4, 1], [0, 5, 3], [2]], torch_seed=123)
    for name in OUTPUTS:
        assert torch.equal(getattr(one_batch, name), getattr(mixed, name)), name
    # Gumbel-max with the env's uniforms: the action is the argmax of logp - log(-log(u))
    served = one_batch.versions == 3
    assert int(served.sum()) == 6


def test_kept_bf16_casts_give_the_same_results_and_follow_each_new_version():
    """The policy worker holds autocast open (casts_kept) so each weight is cast to bf16 once per
    version, and packs its big products' weights once per version (nodes/models/packed.py): the
    results must be those of a pass that casts afresh, before and after an in-place weight update
    (as WeightsReader's), once `weights_changed` has run; without it, the pass would still use the
    old weights' casts and packs (which shows both are really used)."""
    from nodes.models.numerics import casts_kept

    cfg = compose("sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=4")
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()
    new = [p.detach() + 0.01 * torch.randn_like(p) for p in model.parameters()]
    buffers = allocate(spec, cfg.sampler, model.state_size)
    buffers.obs.copy_(torch.randint(0, 255, buffers.obs.shape, generator=torch.Generator().manual_seed(1)))
    n = len(buffers.env_slot)
    buffers.env_slot.copy_(torch.arange(n))
    infer = Inference(model, buffers, torch.device("cpu"), staged=False, precision="bf16")

    def values():
        buffers.env_h.zero_()  # the same state in each pass
        infer(torch.arange(n), version=1)
        return buffers.values[:, 0].clone()

    fresh_before = values()
    with torch.no_grad():
        old = [p.clone() for p in model.parameters()]
        with casts_kept("cpu", "bf16"):
            assert torch.equal(values(), fresh_before) and torch.equal(values(), fresh_before)
            for p, v in zip(model.parameters(), new):
                p.copy_(v)
            stale = values()
            infer.weights_changed()  # what the policy worker does after each new version
            kept_after = values()
        fresh_after = values()
        for p, v in zip(model.parameters(), old):
            p.copy_(v)
    assert torch.equal(kept_after, fresh_after) and not torch.equal(fresh_after, fresh_before)
    assert torch.equal(stale, fresh_before)
