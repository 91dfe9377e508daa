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
