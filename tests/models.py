"""Encoders of one's own for tests (model.encoder=tests.models:<Class>)."""
import torch
from torch import nn


class WrongSize(nn.Module):
    """Declares 32 features and gives 16."""

    def __init__(self, spec, model_cfg):
        super().__init__()
        self.out_size = 32
        self.net = nn.Linear(spec.meas_size, 16)

    def forward(self, obs: dict) -> torch.Tensor:
        return self.net(torch.cat([obs["direction"][:, None].float(), obs["vec"]], -1))


class DataDependent(nn.Module):
    """Trains, but does not trace: its forward branches on a tensor's value, which neither exporter
    can record (an export must say where)."""

    def __init__(self, spec, model_cfg):
        super().__init__()
        self.out_size = 8
        self.net = nn.Linear(spec.meas_size, 8)

    def forward(self, obs: dict) -> torch.Tensor:
        out = self.net(torch.cat([obs["direction"][:, None].float(), obs["vec"]], -1))
        return out if bool(out.sum() > 0) else -out
