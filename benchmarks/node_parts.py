"""The node's parts timed alone, in this process: the figures behind docs/benchmarks.md "The node at its limit".

    python benchmarks/node_parts.py [--env doom_basic] [--compile]

Run from the checkout to measure (it imports `nodes` from the working directory); parts a checkout
does not have are skipped, so the same script times an older commit's learner (`cd OLD && python
NEW/benchmarks/node_parts.py`). Prints, each the median of several timed calls after warm-ups:

- policy pass: ActorCritic.step on 8 envs' frames, 1 thread, bf16 autocast entered per pass (each
  weight cast afresh, as before 2026-11-29), inside `casts_kept` (the casts kept across passes), and
  with the fc's and GRU's weights packed as well (nodes/models/packed.py), as a policy worker runs;
- frames: the normalisation of 8 frames (1 thread) and of a learner batch's 1,056 (2 threads),
  `RunningNorm.forward` to channels-last then cast to bf16, against `RunningNorm.images` under autocast;
- learner step: Learner.train_step on a synthetic batch of 32 trajectories x 32 steps, bf16, 2 threads;
- small products: bf16 linear layers of the policy's shapes, [8 x 2304] x [2304 x 512] and
  [8 or 16 x 512] x [512 x 1536], 1 thread, through autocast's path and on a packed weight;
- copies: 8 frames gathered from the buffers by indexing and by index_select; 8 float frames to
  channels-last bf16 in one converting copy and in two;
- with --compile: torch.compile (Inductor, default mode) of the policy's step and of the learner's
  unroll: the first call's seconds (the compilation) and the compiled timings.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from functools import partial

sys.path.insert(0, os.getcwd())


def timed(call, reps: int, warmup: int = 3) -> float:
    """Median seconds of `reps` calls after `warmup`."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copies(obs_shape) -> None:
    """Two copies of a policy pass, 1 thread: gathering 8 envs' frames from a buffer of 64 slots x 33
    steps by indexing [slots, ts] and by index_select on the flat view (Inference._rows); and 8
    normalised float32 frames to channels-last bf16 in one converting copy and in two (the dtype on
    the contiguous layout, then the layout: RunningNorm.images)."""
    import torch

    torch.set_num_threads(1)
    buf = torch.randint(0, 256, (64, 33, *obs_shape), dtype=torch.uint8)
    flat = buf.view(64 * 33, *obs_shape)
    slots, ts = torch.arange(3, 64, 8), torch.full((8,), 5)
    indexed = timed(lambda: buf[slots, ts], 300)
    selected = timed(lambda: flat.index_select(0, slots * 33 + ts), 300)
    print(f"gather 8 frames (1 thread): indexing {indexed * 1e6:.0f} us, index_select {selected * 1e6:.0f} us",
          flush=True)
    y = torch.rand(8, *obs_shape) * 4
    cl, bf16 = torch.channels_last, torch.bfloat16
    one = timed(lambda: y.to(bf16, memory_format=cl), 300)
    two = timed(lambda: y.to(bf16).contiguous(memory_format=cl), 300)
    print(f"8 float frames to channels-last bf16 (1 thread): one copy {one * 1e6:.0f} us, dtype then layout "
          f"{two * 1e6:.0f} us", flush=True)


def products(packed_weights) -> None:
    """The policy's small bf16 products, 1 thread: through autocast's path (torch's linear) and, where
    the checkout has nodes/models/packed.py, oneDNN's linear on the weight reordered once."""
    import torch

    torch.set_num_threads(1)
    for m, k, n in ((8, 2304, 512), (8, 512, 1536), (16, 512, 1536)):
        a, w = torch.randn(m, k).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16)
        t = timed(partial(torch.nn.functional.linear, a, w), 300)
        line = f"product [{m} x {k}] x [{k} x {n}] (1 thread, bf16): {t * 1e6:.0f} us, {2 * m * k * n / t / 1e9:.0f}"
        line += " GFLOP/s"
        if packed_weights is not None:
            w_packed = torch.ops.mkldnn._reorder_linear_weight(w, packed_weights.ROWS_HINT)
            line += f"; packed {timed(partial(packed_weights._linear, a, w_packed, None), 300) * 1e6:.0f} us"
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="doom_basic")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    import torch

    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    from launch.tools.scaling_harness import synthetic_batch
    from nodes.envs import env_spec
    from nodes.learning.learner import Learner
    from nodes.models import numerics
    from nodes.models.actor_critic import ActorCritic
    from nodes.models.normalisers import RunningNorm

    try:
        from nodes.models import packed as packed_weights
    except ImportError:  # a checkout before 2026-11-29's packed products
        packed_weights = None

    cfg = compose_checked("config", [f"env={args.env}"])
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model).eval()
    g = torch.Generator().manual_seed(0)
    frames = lambda n: torch.randint(0, 256, (n, *spec.obs_shape), dtype=torch.uint8, generator=g)  # noqa: E731
    obs, meas, h = frames(8), torch.zeros(8, spec.meas_size), torch.zeros(8, model.state_size)
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    print(f"node_parts: env={args.env}, torch {torch.__version__}, {os.cpu_count()} cores")

    torch.set_num_threads(1)

    def policy_pass(m=model):
        with bf16():
            m.step(obs, meas, h)

    with torch.no_grad():
        fresh = timed(policy_pass, 200)
        line = f"policy pass of 8 (1 thread, bf16): weights cast afresh {fresh * 1e3:.3f} ms"
        if hasattr(numerics, "casts_kept"):
            with numerics.casts_kept("cpu", "bf16"):
                line += f", casts kept {timed(policy_pass, 200) * 1e3:.3f} ms"
                if packed_weights is not None:
                    packed = copy.deepcopy(model)
                    if packed_weights.PackedWeights.install(packed, torch.device("cpu"), "bf16") is not None:
                        line += f", and packed products {timed(partial(policy_pass, packed), 200) * 1e3:.3f} ms"
        print(line, flush=True)

    norm = RunningNorm(spec.obs_shape)
    norm.mean.copy_(torch.rand(spec.obs_shape, generator=g) * 255)
    norm.var.copy_(torch.rand(spec.obs_shape, generator=g) * 3000 + 1)
    for n, threads in ((8, 1), (1056, 2)):
        torch.set_num_threads(threads)
        x = frames(n)
        reps = 200 if n <= 8 else 5
        with bf16():
            whole = timed(partial(lambda x: norm(x, torch.channels_last).to(torch.bfloat16), x), reps)
            line = f"frames, {n} ({threads} thread(s)): forward + cast {whole * 1e3:.2f} ms"
            if hasattr(norm, "images"):
                line += f", images {timed(partial(norm.images, x), reps) * 1e3:.2f} ms"
        print(line, flush=True)

    torch.set_num_threads(2)
    learn_model = ActorCritic(spec, cfg.model)
    learner = Learner(learn_model, cfg.algo, precision="bf16")
    batch = synthetic_batch(spec, learn_model.state_size, 32, 32, 0)
    step = timed(lambda: learner.train_step(batch), 5, warmup=2)
    print(f"learner step, 32 x 32 samples (2 threads, bf16): {step * 1e3:.0f} ms", flush=True)

    products(packed_weights)
    copies(spec.obs_shape)

    if not args.compile:
        return
    compiled = ActorCritic(spec, cfg.model).eval()
    compiled.load_state_dict(model.state_dict())
    compiled.step = torch.compile(compiled.step, dynamic=False)
    with torch.no_grad():
        t0 = time.perf_counter()
        policy_pass(compiled)
        first = time.perf_counter() - t0
        kept = numerics.casts_kept("cpu", "bf16") if hasattr(numerics, "casts_kept") else bf16()
        with kept:
            then = timed(partial(policy_pass, compiled), 200)
            print(f"compiled policy pass of 8: first call {first:.1f} s, then {then * 1e3:.3f} ms (eager "
                  f"{timed(policy_pass, 200) * 1e3:.3f} ms)", flush=True)
    torch.set_num_threads(2)
    eager = timed(lambda: learner.train_step(batch), 3, warmup=1)
    learn_model.unroll = torch.compile(learn_model.unroll, dynamic=False)
    t0 = time.perf_counter()
    learner.train_step(batch)
    first = time.perf_counter() - t0
    print(f"compiled learner unroll: first step {first:.1f} s, then "
          f"{timed(lambda: learner.train_step(batch), 3, warmup=1) * 1e3:.0f} ms a step (eager {eager * 1e3:.0f} ms)",
          flush=True)


if __name__ == "__main__":
    main()
