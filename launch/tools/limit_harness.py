"""launch.limit's measurements: what this CPU's kernels can do, and the model's arithmetic per frame.

`kernel_rates(threads, seconds)`: the sustained rate (GFLOP/s) of a large matmul (MATMUL x MATMUL x
MATMUL) and of a large 3x3 convolution (CONV_INPUT, channels-last as the encoders run theirs), each
in fp32 and in bf16 (bf16 tensors: the kernels autocast hands bf16 work to), on `threads` threads:
one warm-up call, then calls for `seconds`, the best call's rate. That is the limit's arithmetic
rate: the best the machine's cores do on the kernel kinds the model is made of.

`model_flops(cfg)`: the model's matmul and convolution FLOPs (torch's FlopCounterMode) per agent
step in a policy worker's forward pass (model.step on a batch of envs, divided by the batch) and per
sample in the learner's step (Learner.train_step on a synthetic batch of the configured shape:
every epoch and minibatch of it, forward and backward, divided by the batch's samples).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

MATMUL = 2048  # a square matmul this size: 17.2 GFLOP a call
CONV_INPUT = (64, 64, 56, 56)  # batch, channels, height, width of a 3x3, 64 -> 64 convolution: 14.8 GFLOP a call
PRECISIONS = ("fp32", "bf16")


def _best_rate(call, flops: float, seconds: float) -> float:
    """GFLOP/s of the best of the calls made within `seconds` after one warm-up call."""
    call()
    best, end = float("inf"), time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        call()
        now = time.perf_counter()
        best = min(best, now - t0)
        if now >= end:
            return flops / best / 1e9


def kernel_rates(threads: int, seconds: float = 1.5) -> dict[str, dict[str, float]]:
    """{matmul | conv: {fp32 | bf16: GFLOP/s}} on this CPU with `threads` threads."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    rates: dict[str, dict[str, float]] = {"matmul": {}, "conv": {}}
    n, c = MATMUL, CONV_INPUT
    out_hw = c[2] * c[3]  # padding 1: the map keeps its size
    for precision in PRECISIONS:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
        with torch.no_grad():
            rates["matmul"][precision] = _best_rate(partial(torch.mm, a, b), 2 * n**3, seconds)
            x = torch.randn(*c, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
            w = torch.randn(c[1], c[1], 3, 3, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
            rates["conv"][precision] = _best_rate(partial(F.conv2d, x, w, padding=1),
                                                  2 * c[0] * c[1] * c[1] * 9 * out_hw, seconds)
    return rates


@dataclass
class ModelFlops:
    inference_per_step: float  # FLOPs of one env's row in a policy worker's forward pass
    learning_per_sample: float  # FLOPs of one sample in the learner's step (all its epochs, forward and backward)
    learner_step_s: float  # the learner's step alone on this CPU (launch.scaling's measurement)
    learner_samples: int


def model_flops(cfg) -> ModelFlops:
    """The model's FLOPs per agent step in inference and per sample in learning (module docstring)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from launch.tools.scaling_harness import measure_learner
    from nodes.envs import env_spec
    from nodes.models.actor_critic import ActorCritic

    lf = measure_learner(cfg)
    samples = lf.trajectories * lf.rollout
    spec = env_spec(cfg.env)
    model = ActorCritic(spec, cfg.model).eval()
    rows = 8
    obs_dtype = torch.uint8 if str(spec.obs_dtype) == "uint8" else torch.float32
    obs = torch.zeros(rows, *spec.obs_shape, dtype=obs_dtype)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.step(obs, torch.zeros(rows, spec.meas_size), torch.zeros(rows, model.state_size))
    return ModelFlops(counter.get_total_flops() / rows, lf.flops / samples, lf.iteration_s, samples)


@dataclass
class Limit:
    """The frames/s this machine could reach if every core did only useful work."""

    cores: int
    sim_core_s: float  # core-seconds of simulation per env frame (the simulate phase)
    flops_per_frame: float  # inference + learning, per env frame
    rate_gflops: float  # the arithmetic rate the limit assumes: the best kernel's, in the node's precision

    @property
    def arithmetic_core_s(self) -> float:
        return self.flops_per_frame / (self.rate_gflops * 1e9 / self.cores)

    @property
    def fps(self) -> float:
        return self.cores / (self.sim_core_s + self.arithmetic_core_s)


def limit(cores: int, sim_fps: float, sim_cores: float, flops: ModelFlops, frameskip: int,
          rate_gflops: float) -> Limit:
    """The limit from the simulate phase (its frames/s on `sim_cores` busy cores), the model's FLOPs
    (per agent step, so per frameskip env frames) and the arithmetic rate."""
    per_frame = (flops.inference_per_step + flops.learning_per_sample) / frameskip
    return Limit(cores, sim_cores / sim_fps, per_frame, rate_gflops)
