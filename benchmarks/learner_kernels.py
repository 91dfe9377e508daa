"""Where a CPU learner's step and policy pass go, kernel by kernel, and two layouts sized before building them.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
        python benchmarks/learner_kernels.py [--env doom_basic]

(tcmalloc as the node runs with it: under glibc's malloc a learner step faults its big tensors in
again; benchmarks/learner_step_faults.py.) Run from the checkout (it imports `nodes` from the working
directory). Prints, each the median of repeated calls after warm-ups:

- the learner's step (Learner.train_step, 32 x 32 samples, 1 thread) in fp32 and bf16, then torch's
  profiler over three bf16 steps: the ops with the most time of their own, per step;
- a policy pass of 8 envs (1 thread, bf16, casts kept and products packed as a policy worker runs it)
  and in fp32, then its profile by op and input shape;
- each convolution of the encoder alone on a learner batch (1,056 frames, 1 thread, bf16,
  channels-last): forward and backward, and their GFLOP/s;
- the first convolution as a space-to-depth one (the frame as 48 channels of 18 x 32, a 2 x 2
  kernel: the same products summed in another order), with the rearranging copy;
- the frames' normalisation (RunningNorm.images) against the same arithmetic on frames stored HWC,
  which the conv stack would take as channels-last without a copy: 8 frames (1 thread) and 1,056 (2).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from node_parts import timed  # noqa: E402


def profile_table(run, steps: int, rows: int, by_shape: bool = False) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=by_shape) as p:
        for _ in range(steps):
            run()
    events = sorted(p.key_averages(group_by_input_shape=by_shape), key=lambda e: -e.self_cpu_time_total)[:rows]
    return "\n".join(f"    {e.key:<32} {e.self_cpu_time_total / steps / 1e3:8.2f} ms"
                     + (f"  {str(e.input_shapes)[:70]}" if by_shape else "") for e in events)


def learner_and_policy(spec, cfg) -> None:
    """The learner's step in fp32 and bf16 with its profile, and a policy pass with its profile."""
    import torch

    from launch.tools.scaling_harness import synthetic_batch
    from nodes.learning.learner import Learner
    from nodes.models import numerics
    from nodes.models import packed as packed_weights
    from nodes.models.actor_critic import ActorCritic

    torch.manual_seed(0)
    torch.set_num_threads(1)
    for precision in ("fp32", "bf16"):
        model = ActorCritic(spec, cfg.model)
        learner = Learner(model, cfg.algo, precision=precision)
        batch = synthetic_batch(spec, model.state_size, 32, 32, 0)
        step = timed(lambda: learner.train_step(batch), 3, warmup=2)  # noqa: B023
        print(f"learner step, 32 x 32 samples, 1 thread, {precision}: {step * 1e3:.0f} ms", flush=True)
    print("  by op (bf16, per step):\n" + profile_table(lambda: learner.train_step(batch), 3, 10), flush=True)

    g = torch.Generator().manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()
    obs = torch.randint(0, 256, (8, *spec.obs_shape), dtype=torch.uint8, generator=g)
    meas, h = torch.zeros(8, spec.meas_size), torch.zeros(8, model.state_size)
    with torch.no_grad():
        fp32 = timed(lambda: model.step(obs, meas, h), 200)
        packed_weights.PackedWeights.install(model, torch.device("cpu"), "bf16")
        with numerics.casts_kept("cpu", "bf16"):
            def policy_pass():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    model.step(obs, meas, h)
            print(f"policy pass of 8, 1 thread: bf16 {timed(policy_pass, 200) * 1e3:.2f} ms, fp32 {fp32 * 1e3:.2f} ms")
            print("  by op and shape (bf16, per pass):\n" + profile_table(policy_pass, 100, 10, by_shape=True),
                  flush=True)


def convolutions(spec, cfg, n: int = 1056) -> None:
    """Each convolution alone on a learner batch, then the first one as a space-to-depth one."""
    import torch
    from torch import nn

    from nodes.models.actor_critic import ActorCritic

    bf16 = torch.bfloat16
    torch.set_num_threads(1)

    def fwd_bwd(conv, inp, grad=None):
        def fwd():
            with torch.autocast("cpu", dtype=bf16):
                return conv(inp)
        y = fwd()
        grad = torch.randn_like(y)
        t_fwd = timed(fwd, 5, warmup=2)
        return y, t_fwd, timed(lambda: fwd().backward(grad), 5, warmup=2) - t_fwd

    x = torch.randn(n, *spec.obs_shape).to(bf16).contiguous(memory_format=torch.channels_last)
    convs = [m for m in ActorCritic(spec, cfg.model).encoder.modules() if isinstance(m, nn.Conv2d)]
    for i, conv in enumerate(convs):
        conv.to(memory_format=torch.channels_last)
        xi = x.detach().requires_grad_(i > 0)  # the first one's input needs no gradient
        y, t_fwd, t_bwd = fwd_bwd(conv, xi)
        flops = 2 * y.numel() * conv.weight[0].numel()
        print(f"conv {i} {tuple(xi.shape[1:])} -> {tuple(y.shape[1:])} on {n} frames: forward {t_fwd * 1e3:.1f} ms "
              f"({flops / t_fwd / 1e9:.0f} GFLOP/s), backward {t_bwd * 1e3:.1f} ms "
              f"({flops * (2 if i else 1) / t_bwd / 1e9:.0f} GFLOP/s)", flush=True)
        x = nn.functional.elu(y).detach()

    first = convs[0]
    c, hgt, wid = spec.obs_shape
    k, s = first.kernel_size[0], first.stride[0]
    if k != 2 * s or hgt % s or wid % s:
        return
    frames = torch.randn(n, *spec.obs_shape).to(bf16).contiguous(memory_format=torch.channels_last)

    def s2d():
        return frames.reshape(n, c, hgt // s, s, wid // s, s).permute(0, 1, 3, 5, 2, 4).reshape(
            n, c * s * s, hgt // s, wid // s).contiguous(memory_format=torch.channels_last)

    conv2 = nn.Conv2d(c * s * s, first.out_channels, 2).to(memory_format=torch.channels_last)
    for conv, inp, name in ((first, frames, "as it is"), (conv2, s2d(), "space-to-depth")):
        _, t_fwd, t_bwd = fwd_bwd(conv, inp)
        print(f"first conv {name}: forward {t_fwd * 1e3:.1f} ms, backward {t_bwd * 1e3:.1f} ms", flush=True)
    print(f"  the space-to-depth copy: {timed(s2d, 5, warmup=2) * 1e3:.1f} ms")


def hwc_frames(spec, n: int = 1056) -> None:
    """RunningNorm.images on the frames as stored (CHW) against the same arithmetic on HWC frames."""
    import torch

    from nodes.models.normalisers import CHUNK_ROWS, RunningNorm

    bf16 = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    norm = RunningNorm(spec.obs_shape)
    norm.mean.copy_(torch.rand(spec.obs_shape, generator=g) * 255)
    norm.var.copy_(torch.rand(spec.obs_shape, generator=g) * 3000 + 1)
    mean_hwc, var_hwc = norm.mean.permute(1, 2, 0).contiguous(), norm.var.permute(1, 2, 0).contiguous()
    for rows, threads in ((8, 1), (n, 2)):
        torch.set_num_threads(threads)
        chw = torch.randint(0, 256, (rows, *spec.obs_shape), dtype=torch.uint8, generator=g)
        hwc = chw.permute(0, 2, 3, 1).contiguous()

        def images(chw=chw):
            with torch.autocast("cpu", dtype=bf16):
                return norm.images(chw)

        def from_hwc(hwc=hwc, rows=rows):
            scale = torch.rsqrt(var_hwc + norm.eps)
            shift = -mean_hwc * scale
            out = torch.empty(hwc.shape, dtype=bf16)
            buf = torch.empty((CHUNK_ROWS, *hwc.shape[1:]))
            for i in range(0, rows, CHUNK_ROWS):
                y = buf[: rows - i].copy_(hwc[i : i + CHUNK_ROWS])
                out[i : i + CHUNK_ROWS].copy_(torch.addcmul(shift, y, scale, out=y).clamp_(-norm.clip, norm.clip))
            return out.permute(0, 3, 1, 2)  # channels-last NCHW, no copy

        assert torch.equal(images(), from_hwc()), "the HWC path must give the same values"
        reps = 200 if rows <= 8 else 10
        print(f"frames normalised, {rows} ({threads} thread(s)): as stored (CHW) {timed(images, reps) * 1e3:.3f} "
              f"ms, stored HWC {timed(from_hwc, reps) * 1e3:.3f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="doom_basic")
    args = ap.parse_args()
    import torch

    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    from nodes.envs import env_spec

    cfg = compose_checked("config", [f"env={args.env}"])
    spec = env_spec(cfg.env)
    print(f"learner_kernels: env={args.env}, torch {torch.__version__}, {os.cpu_count()} cores")
    learner_and_policy(spec, cfg)
    if spec.is_image and len(spec.obs_shape) == 3:
        convolutions(spec, cfg)
        hwc_frames(spec)


if __name__ == "__main__":
    main()
