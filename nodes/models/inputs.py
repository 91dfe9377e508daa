"""The model's inputs by name: the buffers' (obs, meas) pair -> a dict of the env's observation keys,
and the built-in encoder of such a dict (one encoder per key, outputs concatenated, as Sample
Factory's multi-input encoder does), or the user's own (model.encoder=pkg.module:Class).

An env of named keys (EnvSpec.keys: a gymnasium Dict, image, categorical or array observation) is
stored as one image and one float32 vector (nodes.envs.observations); `split_inputs` reads each
key back: images [B, C, H, W] uint8 (or float32 when not the stored image), vectors [B, *shape]
float32, categorical indices [B, *shape] int64. An env without keys gives {"obs": obs} and, with
game variables, {"meas": meas}.

A custom encoder is the user's nn.Module class, built as Class(spec, model_cfg) (spec: the
EnvSpec, spec.keys names what it gets), with an int attribute `out_size`; its forward takes the
dict above (raw: no normalisation) and returns [B, out_size] features, which go to the core
(model.core) and the heads. It may define norm_updates(inputs) -> [(RunningNorm, tensor)] for
running statistics the learner keeps (folded like the built-in ones). docs/your-model.md.
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from nodes.envs.observations import CATEGORICAL, PIXELS
from nodes.errors import ConfigError, one_line
from nodes.models.encoders import ENCODERS, two_layer_mlp
from nodes.models.normalisers import RunningNorm, stats_steps

MAX_ONE_HOT = 65536  # categorical inputs wider than this one-hot are refused (an embedding is the answer)
VECTOR_WIDTH = 128  # a vector key's MLP beside an image (as the measurements MLP); model.fc_size without one


def split_inputs(spec, obs: torch.Tensor, meas: torch.Tensor) -> dict[str, torch.Tensor]:
    """The buffers' pair [N, ...] -> {key: [N, *shape]} (see the module's docstring)."""
    if not spec.keys:
        return {"obs": obs, "meas": meas} if spec.meas_size else {"obs": obs}
    vec = meas if spec.meas_size else obs
    out = {}
    for k in spec.keys:
        if k.in_obs:
            out[k.name] = obs
            continue
        x = vec[:, k.start : k.stop].reshape(vec.shape[0], *k.shape)
        out[k.name] = x.long() if k.kind == CATEGORICAL else x
    return out


def custom_class(path: str):
    """model.encoder 'pkg.module:Class' -> the class (one line when it is not importable)."""
    module, _, name = path.rpartition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ConfigError(f"model.encoder '{path}': cannot import '{module}': {one_line(exc)}") from None
    except AttributeError:
        raise ConfigError(f"model.encoder '{path}': module '{module}' has no '{name}'") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"model.encoder '{path}' is not an nn.Module class")
    return cls


def build_custom(spec, model_cfg) -> nn.Module:
    """The user's encoder, its declared out_size checked (one line naming the class)."""
    path = model_cfg.encoder
    try:
        enc = custom_class(path)(spec, model_cfg)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's constructor raises, one line
        raise ConfigError(f"model.encoder '{path}': {type(exc).__name__} building it: {one_line(exc)}") from None
    size = getattr(enc, "out_size", None)
    if not isinstance(size, int) or size < 1:
        raise ConfigError(f"model.encoder '{path}' must set an int attribute out_size >= 1 (its features' width), "
                          f"got {size!r}")
    return enc


class KeyedEncoder(nn.Module):
    """One encoder per observation key, outputs concatenated in the spec's order: images through
    model.encoder's conv stack (auto: conv where the image is large enough for it, else an MLP
    over its pixels), vectors through a two-layer MLP, categorical indices one-hot. Images and
    vectors are normalised per element by running statistics (as the plain observation is)."""

    def __init__(self, spec, model_cfg):
        super().__init__()
        self.spec = spec
        self.norms, self.encoders = nn.ModuleDict(), nn.ModuleDict()
        has_image = any(k.kind == PIXELS and _conv_fits(model_cfg, k) for k in spec.keys)
        width = model_cfg.fc_size if not has_image else VECTOR_WIDTH
        # the modules are named by position (k0, k1, ...): a key's own name may be one ModuleDict
        # refuses ("type", "a.b", "")
        self.slot = {k.name: f"k{i}" for i, k in enumerate(spec.keys)}
        self.out_size, self.conv_keys = 0, []
        for k in spec.keys:
            name = self.slot[k.name]
            if k.kind == CATEGORICAL:
                if k.classes * k.size > MAX_ONE_HOT:
                    raise ConfigError(f"observation key '{k.name}' is {k.size} index(es) of {k.classes} classes: "
                                      f"one-hot, {k.classes * k.size} inputs wide (at most {MAX_ONE_HOT}); give it "
                                      "an embedding in an encoder of your own (docs/your-model.md)")
                self.encoders[name] = OneHot(k.classes)
                self.out_size += k.classes * k.size
                continue
            eps = model_cfg.obs_norm_eps if k.kind == PIXELS else 1e-5  # vectors: as VizDoom's game variables
            self.norms[name] = RunningNorm(k.shape, eps=eps)
            if k.kind == PIXELS and _conv_fits(model_cfg, k):
                kind = "conv" if model_cfg.encoder == "auto" else model_cfg.encoder
                enc = ENCODERS[kind](k.shape, model_cfg.fc_size, model_cfg.fc_layers)
                self.conv_keys.append(name)
                self.out_size += model_cfg.fc_size
            else:
                if k.kind == PIXELS and model_cfg.encoder not in ("auto", "mlp"):
                    raise ConfigError(f"model.encoder={model_cfg.encoder} needs images its conv stack can take; "
                                      f"key '{k.name}' is {k.shape[1]}x{k.shape[2]}: use model.encoder=auto "
                                      "(an MLP over a small image's pixels) or a model of your own")
                enc = two_layer_mlp(k.size, width, model_cfg.mlp_activation)
                self.out_size += width
            self.encoders[name] = enc

    def to_channels_last(self) -> None:
        """The conv encoders' weights channels-last (as ActorCritic's, after the initialisation:
        orthogonal_ views the weight as rows, which a channels-last tensor cannot give)."""
        for name in self.conv_keys:
            self.encoders[name].to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor, meas: torch.Tensor) -> torch.Tensor:
        parts = []
        for key, x in split_inputs(self.spec, obs, meas).items():
            name = self.slot[key]
            if name in self.norms:
                conv = name in self.conv_keys
                x = self.norms[name](x, torch.channels_last if conv else torch.preserve_format)
                if not conv:
                    x = x.flatten(1)
            parts.append(self.encoders[name](x))
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)

    def norm_updates(self, obs: torch.Tensor, meas: torch.Tensor):
        """(norm, values) of a batch [B, T, ...], images from the steps `stats_steps` takes."""
        obs = stats_steps(obs)
        flat = split_inputs(self.spec, obs.flatten(0, 1), meas.flatten(0, 1))
        return [(self.norms[self.slot[key]], x) for key, x in flat.items() if self.slot[key] in self.norms]


class OneHot(nn.Module):
    """Class indices [B, *shape] -> one-hot [B, classes * prod(shape)] (no parameters)."""

    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(x.clamp(0, self.classes - 1), self.classes).flatten(1).float()


def _conv_fits(model_cfg, k) -> bool:
    """Whether model.encoder's conv stack takes this image (mlp: never; auto: conv where it fits)."""
    if k.kind != PIXELS or model_cfg.encoder == "mlp":
        return False
    kind = "conv" if model_cfg.encoder == "auto" else model_cfg.encoder
    try:
        with torch.device("meta"):
            ENCODERS[kind](k.shape, 8, 1)  # shapes only: a too small image fails in its convolutions
        return True
    except RuntimeError:
        return False
