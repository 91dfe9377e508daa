"""A trained policy's one step as a self-contained graph: what ONNX and TorchScript export
(launch.share.export) and what runs without the trainer.

`DeployedPolicy` wraps an ActorCritic. Its inputs, in order (`inputs`):
- the observation as the env gives it, batched: for an env of named keys (a gymnasium Dict, or an
  image, categorical or array observation) one input per key, named by the key, in the env's own
  layout (an HxWxC image stays HxWxC: the graph moves its channels; categorical indices as the env
  gives them, int64; a stack of HxWxC frames as (S*C)xHxW); for the plain pair of the shipped envs
  `obs` (the wrapper's image, uint8 CxHxW, or its float32 vector) and, with game variables, `meas`;
- `state`: the recurrent state [B, state_size] (zeros at an episode's start; a model without a
  core has state_size 1 and passes it through);
- the noise that decides a sampled action, so the graph needs no random generator: `uniform`
  [B, logits] U(0,1) draws for the discrete heads, `normal` [B, continuous dims] standard normal
  draws for a Box action (only those the action space has).
Its outputs (`OUTPUTS`): `action` (sampled: one float32 entry per discrete head, its index, then one
per continuous dim, unclipped, as the trainer's buffers hold it), `greedy` (each head's most likely
action, each dim's mean), `params` (the action parameters: logits, means, log-stds), `value` [B] and
`state` (the next recurrent state). Observation normalisation is inside: its running statistics
are buffers of the model.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from nodes.envs.observations import CATEGORICAL, PIXELS

OUTPUTS = ("action", "greedy", "params", "value", "state_out")


class Input:
    """One graph input: its name, shape without the batch dim, numpy dtype, and what it holds."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype, what: str, low: int = 0, classes: int = 0):
        self.name, self.shape, self.dtype, self.what = name, tuple(shape), np.dtype(dtype), what
        self.low, self.classes = low, classes  # categorical: the indices the env gives, low .. low + classes - 1

    def describe(self) -> dict:
        return {"name": self.name, "shape": ["batch", *self.shape], "dtype": self.dtype.name, "what": self.what}

    def example(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """A random batch of this input (export's example; the parity test's observations)."""
        if self.name == "state":
            return rng.standard_normal((batch, *self.shape)).astype(self.dtype) * 0.1
        if self.name == "normal":
            return rng.standard_normal((batch, *self.shape)).astype(self.dtype)
        if self.dtype == np.uint8:
            return rng.integers(0, 256, (batch, *self.shape), dtype=np.uint8)
        if self.dtype.kind == "i":
            return rng.integers(self.low, self.low + max(self.classes, 1), (batch, *self.shape), dtype=self.dtype)
        return rng.random((batch, *self.shape), dtype=np.float32).astype(self.dtype)


def env_shape(key) -> tuple[int, ...]:
    """A named key's shape as the env gives it (ObsKey.shape is as the model reads it)."""
    c, h, w = key.shape if key.kind == PIXELS else (0, 0, 0)
    if key.layout == "hwc":
        return (h, w, c)
    if key.layout == "hw":
        return (h, w)
    return key.shape  # chw, and a stack of HxWxC frames (shwc) as the model reads it: (S*C)xHxW


def inputs_of(spec, state_size: int) -> list[Input]:
    """The graph's inputs for an env spec (see the module's docstring)."""
    out = []
    if spec.keys:
        for k in spec.keys:
            if k.kind == PIXELS:
                what = "frames stacked channel-wise, (S*C)xHxW" if k.layout == "shwc" else f"image ({k.layout})"
                out.append(Input(k.name, env_shape(k), np.uint8, what))
            elif k.kind == CATEGORICAL:
                out.append(Input(k.name, k.shape, np.int64, f"class indices {k.low}..{k.low + k.classes - 1}",
                                 low=k.low, classes=k.classes))
            else:
                out.append(Input(k.name, k.shape, np.float32, "vector"))
    else:
        out.append(Input("obs", spec.obs_shape, spec.obs_dtype, "image CxHxW" if spec.is_image else "vector"))
        if spec.meas_size:
            out.append(Input("meas", (spec.meas_size,), np.float32, "game variables"))
    out.append(Input("state", (state_size,), np.float32, "recurrent state (zeros at an episode's start)"))
    if spec.action_heads:
        out.append(Input("uniform", (sum(spec.action_heads),), np.float32, "U(0,1) draws, one per logit"))
    if spec.continuous:
        out.append(Input("normal", (spec.continuous,), np.float32, "standard normal draws, one per action dim"))
    return out


class DeployedPolicy(nn.Module):
    """ActorCritic.step on the env's observation, with the action drawn from given noise."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.spec = model.spec
        self.inputs = inputs_of(self.spec, model.state_size)
        self.n_obs = len(self.inputs) - 1 - bool(self.spec.action_heads) - bool(self.spec.continuous)

    def forward(self, *args: torch.Tensor):
        spec = self.spec
        observed, state, noise = args[: self.n_obs], args[self.n_obs], list(args[self.n_obs + 1 :])
        obs, meas = self._stored(observed) if spec.keys else (observed[0], observed[1] if spec.meas_size else None)
        if meas is None:
            meas = obs.new_zeros((obs.shape[0], 0), dtype=torch.float32)
        params, value, state = self.model.step(obs, meas, state)
        uniform = noise.pop(0) if spec.action_heads else None
        normal = noise.pop(0) if spec.continuous else None
        heads = self.model.heads
        return heads.draw(params, uniform, normal), heads.greedy(params), params, value, state

    def _stored(self, observed):
        """The env's named observations -> the buffers' (obs, meas) pair (as nodes.envs.observations'
        Packer does for one observation), in the graph."""
        image, parts = None, []
        for k, x in zip(self.spec.keys, observed):
            if k.layout == "hwc":
                x = x.permute(0, 3, 1, 2)
            elif k.layout == "hw":
                x = x.unsqueeze(1)
            if k.low:
                x = x - k.low
            if k.in_obs:
                image = x
            else:
                parts.append(x.reshape(x.shape[0], -1).to(torch.float32))
        vec = torch.cat(parts, -1) if len(parts) > 1 else parts[0] if parts else None
        return (vec, None) if image is None else (image, vec)
