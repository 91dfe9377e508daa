"""The one flat buffer a gradient all-reduce sends: every trainable parameter's gradient times the
node's sample count, the running norms' moments, which parameters had a gradient, then the sample
count and the flags (the stop vote as nodes.run.peers.vote_flags, a join seen). Summed over ranks it
is everything an update needs, in one collective; `unpack` turns the sum into the sample-weighted mean.

Every trainable parameter takes part, with a gradient or without: ranks that differ in which
parameters got one (a head unused in this batch) still send buffers of one layout. A missing
gradient counts as zeros in the mean, and every parameter that had a gradient on some rank gets the
mean on every rank (the per-parameter `had` counts ride along), so every rank steps the same
parameters; one that had none anywhere keeps None, as with one node.
"""
from __future__ import annotations

import torch
from torch import nn


def pack(params: list[nn.Parameter], num_samples: int, flags: tuple[float, ...],
         sums: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """[gradients x samples | sums | had a gradient, per parameter | samples | flags]; returns it and
    the gradients' length. The scalars are written in place (fill kernels), not copied from a host
    tensor: no host sync on CUDA."""
    device = params[0].device
    grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype, device=device)
             for p in params]
    extra = [] if sums is None else [sums.reshape(-1)]
    had = torch.ones(len(params), device=device)
    for i in (i for i, p in enumerate(params) if p.grad is None):
        had[i] = 0.0  # a fill kernel per missing gradient (usually none), not a copy from the host
    flat = torch.cat(grads + extra + [had, torch.zeros(1 + len(flags), device=device)])
    size = sum(g.numel() for g in grads)
    flat[:size].mul_(float(num_samples))
    flat[-1 - len(flags)] = float(num_samples)
    for i, flag in enumerate(flags):
        flat[len(flat) - len(flags) + i] = flag
    return flat, size


def unpack(params: list[nn.Parameter], flat: torch.Tensor, size: int, sums: torch.Tensor | None,
           n_flags: int = 2) -> list[float]:
    """The summed buffer into the mean gradient of every parameter some rank had one for, the summed
    moments into `sums`; returns [total samples, *summed flags] (reading them is the host sync on
    CUDA). A population member with no samples anywhere gets zeros."""
    tail = flat[-1 - n_flags:].tolist()
    flat[:size].div_(max(tail[0], 1.0))
    n_sums = 0 if sums is None else sums.numel()
    had = flat[size + n_sums : size + n_sums + len(params)].tolist()
    offset = 0
    for p, anyone in zip(params, had):
        mean = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
        if p.grad is not None:
            p.grad.copy_(mean)
        elif anyone > 0:
            p.grad = mean.clone()
    if sums is not None:
        sums.copy_(flat[size : size + n_sums].view_as(sums))
    return tail
