"""GPU code paths, tested as far as a CPU allows (docs/gpu.md, "What has and has not run").

- The learner step on the `meta` device: a stand-in accelerator on which any stray CPU tensor
  (a device mismatch) and any host sync (`.item()`, `float()`, `.cpu()` of a meta tensor) raise,
  so the step up to its single `.tolist()` is shown to stay on the device.
- The policy worker's staged path (one pinned row per env in, one out: what it does on a GPU),
  run on the CPU and compared with the direct path it replaces there.
"""
from __future__ import annotations

import signal

import pytest
import torch

from nodes.envs import env_spec
from nodes.learning.learner import LOGGED, Learner
from nodes.models.actor_critic import ActorCritic
from nodes.sampling.buffers import SlotBatch, allocate
from nodes.sampling.policy_worker import Inference, Staging
from tests.helpers import compose


def _spec_cfg(*overrides):
    cfg = compose("sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=4",
                  "sampler.batch_size=8", "model.fc_size=32", "model.hidden_size=16", *overrides)
    return env_spec(cfg.env), cfg


def _batch(spec, cfg, model, device):
    s, t = 2, cfg.sampler.rollout
    def rand(*shape, dtype=torch.float32):
        return (torch.randint(0, 255, shape) if dtype == torch.uint8 else torch.rand(shape)).to(dtype)
    batch = SlotBatch(
        obs=rand(s, t + 1, *spec.obs_shape, dtype=torch.uint8), meas=rand(s, t + 1, spec.meas_size),
        actions=torch.zeros(s, t, spec.action_width), logp=-rand(s, t), values=rand(s, t),
        rewards=rand(s, t), dones=torch.zeros(s, t, dtype=torch.bool),
        versions=torch.zeros(s, t, dtype=torch.int64), h0=torch.zeros(s, model.state_size))
    if device != "cpu":  # what SlotBatch.to does for an accelerator, but to `meta` (no data)
        for name in SlotBatch.FIELDS:
            if name != "versions":  # the learner reads the lag from the CPU copy
                setattr(batch, name, getattr(batch, name).to(device))
    return batch


@pytest.mark.parametrize("env", ["doom_basic", "doom_deathmatch"])
def test_the_learner_step_stays_on_the_device_until_its_one_host_sync(env):
    """doom_deathmatch: VizDoom measurements and the measurement MLP (model=full) too."""
    spec, cfg = _spec_cfg(f"env={env}", *(["model=full"] if env == "doom_deathmatch" else []))
    model = ActorCritic(spec, cfg.model).to("meta")
    learner = Learner(model, cfg.algo)
    batch = _batch(spec, cfg, model, "meta")
    batch.to = lambda device: batch  # already on the device
    scalars, samples, stop_voted, timer = learner.device_step(batch, vote=signal.SIGTERM)
    assert scalars.device.type == "meta" and scalars.shape == (len(LOGGED),)
    assert samples == batch.num_samples and stop_voted == signal.SIGTERM and learner.version == 1
    for p in model.parameters():
        assert p.device.type == "meta"
    with pytest.raises((RuntimeError, NotImplementedError)):
        scalars.tolist()  # the one sync is where the data would have to come back: not before


def test_the_same_step_on_the_cpu_gives_finite_logged_values():
    spec, cfg = _spec_cfg()
    model = ActorCritic(spec, cfg.model)
    stats = Learner(model, cfg.algo).train_step(_batch(spec, cfg, model, "cpu"))
    for key in (*LOGGED, "policy_lag_mean", "sync_s", "step_s"):
        assert isinstance(stats[key], float) and stats[key] == stats[key], key
    assert stats["sync_s"] >= 0 and stats["policy_lag_mean"] == 0.0


@pytest.mark.parametrize("env", ["doom_basic", "doom_deathmatch"])
def test_the_staged_inference_path_matches_the_direct_one(env):
    spec, cfg = _spec_cfg(f"env={env}", *(["model=full"] if env == "doom_deathmatch" else []))
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()
    results = []
    for staged in (False, True):
        buffers = allocate(spec, cfg.sampler, model.state_size)
        g = torch.Generator().manual_seed(1)
        buffers.obs.copy_(torch.randint(0, 255, buffers.obs.shape, generator=g).to(buffers.obs.dtype))
        buffers.meas.copy_(torch.rand(buffers.meas.shape, generator=g))
        buffers.env_h.copy_(torch.rand(buffers.env_h.shape, generator=g))
        buffers.env_slot.copy_(torch.tensor([3, 0, 2, 1]))
        buffers.env_t.copy_(torch.tensor([0, 2, 1, 0]))
        torch.manual_seed(7)  # the same action samples in both paths
        Inference(model, buffers, torch.device("cpu"), staged=staged)(torch.tensor([0, 2, 3]), version=5)
        results.append(buffers)
    direct, staged = results
    for name in ("actions", "versions", "h0"):
        assert torch.equal(getattr(direct, name), getattr(staged, name)), name
    for name in ("logp", "values", "env_h"):  # the same maths on differently laid out inputs
        torch.testing.assert_close(getattr(direct, name), getattr(staged, name), rtol=1e-5, atol=1e-6)
    assert (staged.versions[3, 0] == 5) and (staged.versions[0, 0] == 0)  # env 1 was not served


def test_staging_rows_keep_float_parts_aligned_for_odd_observation_sizes():
    spec, cfg = _spec_cfg("env=gym", "env.id=CartPole-v1")  # float32 vector observations
    model = ActorCritic(spec, cfg.model)
    buffers = allocate(spec, cfg.sampler, model.state_size)
    st = Staging(buffers, torch.device("cpu"), 4)
    assert (st.obs_bytes + st.obs_pad) % 4 == 0


def test_bf16_autocast_trains_end_to_end_with_fp32_log_probs(tmp_path):
    """train.precision=bf16 on the CPU (this one has bf16 units): policy workers and learner both
    under autocast, buffers and logits still fp32; a short CartPole run goes through."""
    from tests.helpers import FAST_GYM, summary, train

    run = str(tmp_path / "run")
    train(run, *FAST_GYM, "train.precision=bf16", "train.max_env_frames=3000", timeout=180)
    s = summary(run)
    assert s["outcome"] == "finished" and s["policy_version"] > 0
    spec, cfg = _spec_cfg("train.precision=bf16")
    model = ActorCritic(spec, cfg.model)
    from nodes.models.numerics import autocast
    with autocast("cpu", "bf16"):
        logits, values, state = model.step(torch.zeros(2, *spec.obs_shape, dtype=torch.uint8),
                                           torch.zeros(2, spec.meas_size), torch.zeros(2, model.state_size))
    assert logits.dtype == values.dtype == state.dtype == torch.float32
