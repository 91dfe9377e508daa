"""Numerics shared by the policy workers and the learner: the forward passes' precision, deterministic
kernels, and a checksum of a model's parameters (ranks compare it to prove they hold the same weights).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys

import torch
from torch import nn


def param_checksum(model: nn.Module) -> str:
    """sha256 over the parameters' bytes: equal on two ranks iff their parameters are bit-identical."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def autocast(device: torch.device | str, precision: str):
    """The forward passes' precision (train.precision), the same in the policy workers and the
    learner: fp32, or bf16 autocast (matmuls and convolutions; on CPUs with bf16 units and on
    GPUs). Logits and values leave the model in fp32 either way."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


@contextlib.contextmanager
def casts_kept(device: torch.device | str, precision: str):
    """Hold `autocast(device, precision)` open around many forward passes, so that autocast's cache
    keeps each weight's bf16 copy from one pass to the next instead of casting every weight again
    in each (it clears the cache when its outermost context exits; a policy worker's pass over 8
    envs spent a third of its time in those casts). The casts are the same, so are the results.
    The cache is only used under torch.no_grad (not inference_mode) for weights that require grad,
    and it knows nothing of in-place updates: call torch.clear_autocast_cache() whenever the weights
    change (nodes/sampling/policy_worker.py does, after each new version)."""
    if precision != "bf16":
        yield
        return
    with autocast(device, precision):
        try:
            yield
        finally:
            torch.clear_autocast_cache()


def deterministic_kernels() -> None:
    """sampler.mode=deterministic: ask torch for deterministic kernels (on CPU ours already are;
    on CUDA cuBLAS needs its workspace fixed before the first call, and an op without a
    deterministic kernel warns rather than stopping the run). Call before CUDA is first used.

    torch.use_deterministic_algorithms also sets TorchInductor's `deterministic` flag, and imports
    torch._inductor.config for it (with torch._dynamo: hundreds of modules, a large share of the
    node's and of every policy worker's start-up) for a compiler the trainer never uses
    (nodes/learning/adam.py avoids that import too). So the flag torch's kernels read is set directly, and
    Inductor's only where something already imported it. tests/test_models.py checks the flags
    and that nothing imported the compiler."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True
    torch._C._set_deterministic_algorithms(True, warn_only=True)
