"""Running normalisers: per-element running mean and variance, kept as buffers, not parameters.

The learner folds each batch in; policy workers receive the statistics with the weights. A batch's
moments are one float32 vector so that several norms' moments ride in the gradient all-reduce
together (Peers.reduce_gradients) and every node folds in the same sum.
"""
from __future__ import annotations

import torch
from torch import nn

IMAGE_STATS_EVERY = 8  # of each trajectory's steps, the images of one in this many feed the statistics
CHUNK_ROWS = 8  # images normalised at a time (RunningNorm.images): 8 VizDoom frames in float32 are 0.9 MB


class RunningNorm(nn.Module):
    """Per-element running mean/std of observations (buffers, not parameters).

    Updated by the learner from each batch; policy workers receive it with the weights. For
    pixels this subtracts the mean frame, so what moves (a monster) stands out from the static
    room; without it the conv stack learns far slower on VizDoom.
    """

    def __init__(self, shape, clip: float = 5.0, eps: float = 1e-5):
        """eps: added to the running variance before dividing by its root, in the input's own units
        (model.obs_norm_eps for the observations): it bounds how far an element that barely varies
        is magnified."""
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros(()))
        self.clip, self.eps = clip, eps

    @torch.no_grad()
    def moments(self, x: torch.Tensor) -> torch.Tensor:
        """A batch's moments about the running mean, as one float32 vector: [count, sum of d, sum of
        d^2] with d = x - mean. Every node holds the same running mean, so these sum over nodes,
        and they ride in the gradient all-reduce (Peers.reduce_gradients: no collective of their
        own). About the mean, float32 is enough: raw sums of squares of 0..255 pixels lose the
        variance of a near-constant pixel to cancellation (E[x^2] - E[x]^2); only the first batch,
        taken about a mean of 0, carries that error, diluted by every later one (tests/test_models.py)."""
        d = x.reshape(-1, *self.mean.shape).to(torch.float32, copy=True).sub_(self.mean)
        first = d.sum(0).flatten()
        return torch.cat([d.new_full((1,), float(d.shape[0])), first, d.mul_(d).sum(0).flatten()])

    @torch.no_grad()
    def fold(self, moments: torch.Tensor) -> None:
        """Merge moments (this norm's `moments`, possibly summed over nodes) into the running ones."""
        n, size = moments[0], self.mean.numel()
        delta = (moments[1 : 1 + size] / n).view_as(self.mean)  # the batch's mean minus the running mean
        b_var = ((moments[1 + size :] / n).view_as(self.mean) - delta.pow(2)).clamp_(min=0.0)
        total = self.count + n
        self.var.copy_((self.var * self.count + b_var * n + delta.pow(2) * self.count * n / total) / total)
        self.mean += delta * (n / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, unclipped (value targets: algo.normalize_returns)."""
        return (x - self.mean) * torch.rsqrt(self.var + self.eps)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sqrt(self.var + self.eps) + self.mean

    def forward(self, x: torch.Tensor, memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """(x - mean) / std, clipped, as float32 in `memory_format`. One float copy (converting the
        layout on the way), then one fused multiply-add and the clip in place: on a learner batch of
        pixels each pass is 100+ MB, and each new tensor cost as much as its arithmetic."""
        y = x.to(torch.float32, memory_format=memory_format, copy=True)
        scale = torch.rsqrt(self.var + self.eps)
        return torch.addcmul(-self.mean * scale, y, scale, out=y).clamp_(-self.clip, self.clip)

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """`forward` for a conv stack's input [N, C, H, W]: channels-last, and in autocast's dtype
        where autocast is on (the first convolution would cast it to that anyway: the same values);
        without autocast, `forward` itself. Under autocast the arithmetic runs on the frames as they
        come (contiguous, so on the vectorised path; on channels-last floats the broadcast
        statistics sent addcmul down a slow one); then a contiguous copy converts the dtype and a
        second the layout, in the narrow dtype: on a CPU the layout copy of 3 channels costs per
        element, not per byte, so one copy converting both is slower than the two. On a CPU a
        learner's batch goes CHUNK_ROWS images at a time, so the float32 intermediate stays in the
        cache. On a GPU (one launch per operation) the batch goes whole, in one converting copy. The
        same operations element by element, so the same bits (tests/test_models.py); the timings:
        `python benchmarks/node_parts.py` (docs/benchmarks.md#figures-behind-the-codes-choices)."""
        if not _autocast_on(x.device.type):  # float32: forward's one converting copy is as fast
            return self.forward(x, torch.channels_last)
        dtype = torch.get_autocast_dtype(x.device.type)
        scale = torch.rsqrt(self.var + self.eps)
        shift = -self.mean * scale
        if x.device.type != "cpu":  # one launch per operation
            return self._clipped(x.to(torch.float32), shift, scale).to(dtype, memory_format=torch.channels_last)
        if len(x) <= CHUNK_ROWS:  # one chunk: its own tensors
            return self._clipped(x.to(torch.float32), shift, scale).to(dtype).contiguous(
                memory_format=torch.channels_last)
        out = torch.empty(x.shape, dtype=dtype, device=x.device, memory_format=torch.channels_last)
        buf = torch.empty((CHUNK_ROWS, *x.shape[1:]), device=x.device)
        for i in range(0, len(x), CHUNK_ROWS):
            y = buf[: len(x) - i].copy_(x[i : i + CHUNK_ROWS])
            out[i : i + CHUNK_ROWS].copy_(self._clipped(y, shift, scale).to(dtype))
        return out

    def _clipped(self, y: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """y * scale + shift, clipped, in place (y float32): `forward`'s arithmetic."""
        return torch.addcmul(shift, y, scale, out=y).clamp_(-self.clip, self.clip)


def _autocast_on(device_type: str) -> bool:
    """Whether autocast is on for this device type; False for one autocast does not know (meta)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return False


def stats_steps(obs: torch.Tensor) -> torch.Tensor:
    """The steps of a learner batch [B, T, ...] whose observations feed the running statistics: of
    images, every IMAGE_STATS_EVERY-th step of each trajectory (a batch of VizDoom frames is tens of
    millions of values, and their moments cost a large share of the learner's step, where a
    per-pixel mean over hundreds of steps of 128+ frames each is as good as over 1024 each); of
    vectors [B, T, n], every step."""
    return obs[:, ::IMAGE_STATS_EVERY] if obs.dim() > 3 else obs


def batch_moments(updates: list[tuple[RunningNorm, torch.Tensor]]) -> torch.Tensor:
    """Several norms' batch moments in one vector (summed over nodes as one: the learner hands it
    to the gradient all-reduce, since each collective costs the ring's latency at scale)."""
    return torch.cat([norm.moments(x) for norm, x in updates])


def fold_moments(updates: list[tuple[RunningNorm, torch.Tensor]], moments: torch.Tensor) -> None:
    """Fold `batch_moments(updates)` (summed over nodes or not) into each norm."""
    sizes = [1 + 2 * norm.mean.numel() for norm, _ in updates]
    for (norm, _), m in zip(updates, moments.split(sizes)):
        norm.fold(m)
