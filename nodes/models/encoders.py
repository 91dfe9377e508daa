"""Encoders: an observation batch -> a feature vector per row, each sized from the env spec.

model.encoder picks one by name (ENCODERS; encoder=auto: conv for images, mlp for vectors):
- conv: the Sample Factory paper's "simplified" conv stack, sized as Sample Factory 2 sizes it;
- nature: DQN's conv stack with ReLU (Sample Factory 2's Atari encoder);
- impala: the IMPALA ResNet;
- mlp: a two-layer MLP for vector observations.
The conv encoders end in model.fc_layers fully connected layers of model.fc_size.
"""
from __future__ import annotations

import torch
from torch import nn


class ConvEncoder(nn.Module):
    """The "simplified" encoder of Sample Factory (Petrenko et al. 2020): 3 convolutions (32 8x8/4,
    64 4x4/2, 128 3x3/2, ELU) + fully connected layers (fc_layers of fc_size)."""

    LAYERS = ((32, 8, 4), (64, 4, 2), (128, 3, 2))  # (channels, kernel, stride)
    ACTIVATION = nn.ELU

    def __init__(self, obs_shape, fc_size: int, fc_layers: int = 1):
        super().__init__()
        layers, c = [], obs_shape[0]
        for out, kernel, stride in self.LAYERS:
            # in place (ELU's and ReLU's backward need only the output): no second 70 MB activation per layer
            layers += [nn.Conv2d(c, out, kernel, stride=stride), self.ACTIVATION(inplace=True)]
            c = out
        self.conv = nn.Sequential(*layers, nn.Flatten())
        self.fc = _fc_stack(_flat_size(self.conv, obs_shape), fc_size, fc_layers, lambda: self.ACTIVATION(inplace=True))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(obs))


class NatureEncoder(ConvEncoder):
    """DQN's conv stack (Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1) with ReLU, then the fc
    layers: Sample Factory 2's Atari encoder (convnet_atari, nonlinearity relu). On 84x84 frames
    its last map is 7x7 (3,136 features) against the simplified stack's 4x4 (2,048)."""

    LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    ACTIVATION = nn.ReLU


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.net = nn.Sequential(nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1),
                                 nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class ImpalaEncoder(nn.Module):
    """IMPALA's ResNet (Espeholt et al. 2018): 3 stages of conv 3x3 + max-pool 3x3/2 + 2 residual
    blocks with 16, 32, 32 channels, then ReLU and fully connected layers (one in the paper)."""

    def __init__(self, obs_shape, fc_size: int, fc_layers: int = 1):
        super().__init__()
        layers, c = [], obs_shape[0]
        for out in (16, 32, 32):
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
                       _Residual(out), _Residual(out)]
            c = out
        self.conv = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self.fc = _fc_stack(_flat_size(self.conv, obs_shape), fc_size, fc_layers, nn.ReLU)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(obs))


MLP_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU}  # model.mlp_activation


def two_layer_mlp(size: int, width: int, activation: str = "elu") -> nn.Sequential:
    """Two linear layers of `width`, each followed by model.mlp_activation: MLPEncoder's, and a
    vector key's encoder beside an image (nodes.models.inputs.KeyedEncoder)."""
    act = MLP_ACTIVATIONS[activation]
    return nn.Sequential(nn.Linear(size, width), act(), nn.Linear(width, width), act())


class MLPEncoder(nn.Module):
    def __init__(self, obs_shape, fc_size: int, fc_layers: int = 1, activation: str = "elu"):  # always two layers
        super().__init__()
        self.net = two_layer_mlp(obs_shape[0], fc_size, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


ENCODERS = {"conv": ConvEncoder, "nature": NatureEncoder, "impala": ImpalaEncoder, "mlp": MLPEncoder}


def _fc_stack(width_in: int, fc_size: int, layers: int, activation) -> nn.Sequential:
    """`layers` fully connected layers of fc_size, each followed by a fresh `activation()`."""
    out = []
    for i in range(layers):
        out += [nn.Linear(width_in if i == 0 else fc_size, fc_size), activation()]
    return nn.Sequential(*out)


def _flat_size(conv: nn.Module, obs_shape) -> int:
    with torch.no_grad():
        return conv(torch.zeros(1, *obs_shape)).shape[1]
