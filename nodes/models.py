"""Actor-critic models: encoder -> (GRU core) -> actor and critic heads.

The "simplified" model of the Sample Factory paper, sized as Sample Factory 2 sizes it:
conv 32 8x8/4, 64 4x4/2, 128 3x3/2 (ELU), fc 512 (ELU), GRU 512, linear actor and critic heads.
Vector observations get a two-layer MLP encoder instead. Shapes come from the env spec.

The same GRUCell serves the policy worker (one step) and the learner (BPTT over the rollout),
so behaviour and learner log-probabilities agree to float precision at equal parameters.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import nn


class ConvEncoder(nn.Module):
    def __init__(self, obs_shape, fc_size: int):
        super().__init__()
        c = obs_shape[0]
        self.conv = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4), nn.ELU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ELU(),
            nn.Conv2d(64, 128, 3, stride=2), nn.ELU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = self.conv(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n, fc_size), nn.ELU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # uint8 pixels -> [0, 1] floats inside the model, so buffers stay uint8 (4x less memory).
        return self.fc(self.conv(obs.float().mul_(1.0 / 255.0)))


class MLPEncoder(nn.Module):
    def __init__(self, obs_shape, fc_size: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_shape[0], fc_size), nn.ELU(), nn.Linear(fc_size, fc_size), nn.ELU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())


class ActorCritic(nn.Module):
    def __init__(self, spec, model_cfg):
        super().__init__()
        kind = model_cfg.encoder
        if kind == "auto":
            kind = "conv" if spec.is_image else "mlp"
        self.encoder = (ConvEncoder if kind == "conv" else MLPEncoder)(spec.obs_shape, model_cfg.fc_size)
        self.recurrent = model_cfg.core == "gru"
        self.hidden_size = model_cfg.hidden_size if self.recurrent else 1
        self.core = nn.GRUCell(model_cfg.fc_size, model_cfg.hidden_size) if self.recurrent else None
        out = model_cfg.hidden_size if self.recurrent else model_cfg.fc_size
        self.actor = nn.Linear(out, spec.num_actions)
        self.critic = nn.Linear(out, 1)

    def step(self, obs: torch.Tensor, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for a batch of envs: (logits, value, new hidden state)."""
        x = self.encoder(obs)
        if self.recurrent:
            h = self.core(x, h)
            x = h
        return self.actor(x), self.critic(x).squeeze(-1), h

    def unroll(self, obs: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor):
        """BPTT over trajectories. obs [B, T+1, ...], h0 [B, H], dones [B, T] (done after step t).

        Returns logits [B, T+1, A] and values [B, T+1]; step T only serves the bootstrap value.
        """
        b, t1 = obs.shape[:2]
        x = self.encoder(obs.reshape(b * t1, *obs.shape[2:])).view(b, t1, -1)
        if self.recurrent:
            keep = 1.0 - dones.float()
            h, outs = h0, []
            for t in range(t1):
                h = self.core(x[:, t], h)
                outs.append(h)
                if t < t1 - 1:
                    h = h * keep[:, t : t + 1]  # a new episode starts from a zero state
            x = torch.stack(outs, 1)
        return self.actor(x), self.critic(x).squeeze(-1)


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
