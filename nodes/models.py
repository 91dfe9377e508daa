"""Actor-critic models: encoder -> (GRU core) -> actor and critic heads.

The "simplified" model of the Sample Factory paper, sized as Sample Factory 2 sizes it:
conv 32 8x8/4, 64 4x4/2, 128 3x3/2 (ELU), fc 512 (ELU), GRU 512, linear actor and critic heads.
Vector observations get a two-layer MLP encoder instead. Shapes come from the env spec.

The same GRUCell serves the policy worker (one step) and the learner (BPTT over the rollout),
so behaviour and learner log-probabilities agree to float precision at equal parameters.
"""
from __future__ import annotations

import hashlib
from typing import Tuple

import torch
from torch import nn


class RunningNorm(nn.Module):
    """Per-element running mean/std of observations (buffers, not parameters).

    Updated by the learner from each batch; policy workers receive it with the weights. For
    pixels this subtracts the mean frame, so what moves (a monster) stands out from the static
    room; without it the conv stack learns far slower on VizDoom.
    """

    def __init__(self, shape, clip: float = 5.0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros(()))
        self.clip = clip

    @torch.no_grad()
    def update(self, x: torch.Tensor, all_sum=None) -> None:
        """Fold a batch in; `all_sum` sums the batch moments over nodes so every node agrees."""
        x = x.reshape(-1, *self.mean.shape).double()  # float64: E[x^2] - E[x]^2 on 0..255 pixels
        moments = torch.cat([torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device),
                             x.sum(0).flatten(), x.pow(2).sum(0).flatten()])
        if all_sum is not None:
            moments = all_sum(moments)
        n, size = moments[0], self.mean.numel()
        b_mean = (moments[1 : 1 + size] / n).view_as(self.mean)
        b_var = (moments[1 + size :] / n).view_as(self.mean) - b_mean.pow(2)
        b_var = b_var.clamp_(min=0.0).float()
        b_mean, n = b_mean.float(), n.float()
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * (n / total)
        self.var.copy_((self.var * self.count + b_var * n + delta.pow(2) * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.float() - self.mean) * torch.rsqrt(self.var + 1e-5)).clamp_(-self.clip, self.clip)


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
        return self.fc(self.conv(obs))


class MLPEncoder(nn.Module):
    def __init__(self, obs_shape, fc_size: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_shape[0], fc_size), nn.ELU(), nn.Linear(fc_size, fc_size), nn.ELU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ActorCritic(nn.Module):
    def __init__(self, spec, model_cfg):
        super().__init__()
        kind = model_cfg.encoder
        if kind == "auto":
            kind = "conv" if spec.is_image else "mlp"
        # Observations stay uint8 in the buffers (4x less memory); they become floats here.
        self.obs_norm = RunningNorm(spec.obs_shape)
        self.encoder = (ConvEncoder if kind == "conv" else MLPEncoder)(spec.obs_shape, model_cfg.fc_size)
        self.recurrent = model_cfg.core == "gru"
        self.hidden_size = model_cfg.hidden_size if self.recurrent else 1
        self.core = nn.GRUCell(model_cfg.fc_size, model_cfg.hidden_size) if self.recurrent else None
        out = model_cfg.hidden_size if self.recurrent else model_cfg.fc_size
        self.actor = nn.Linear(out, spec.action_heads[0])
        self.critic = nn.Linear(out, 1)
        self.apply(_init)


    def step(self, obs: torch.Tensor, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step for a batch of envs: (logits, value, new hidden state)."""
        x = self.encoder(self.obs_norm(obs))
        if self.recurrent:
            h = self.core(x, h)
            x = h
        return self.actor(x), self.critic(x).squeeze(-1), h

    def unroll(self, obs: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor):
        """BPTT over trajectories. obs [B, T+1, ...], h0 [B, H], dones [B, T] (done after step t).

        Returns logits [B, T+1, A] and values [B, T+1]; step T only serves the bootstrap value.
        """
        b, t1 = obs.shape[:2]
        x = self.encoder(self.obs_norm(obs.reshape(b * t1, *obs.shape[2:]))).view(b, t1, -1)
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


def _init(module: nn.Module) -> None:
    # Orthogonal weights with gain 1 and zero biases for conv and linear layers (heads included);
    # the GRU keeps PyTorch's own initialisation. Sample Factory's defaults, which learn VizDoom
    # quickly; a larger gain made the policy collapse early, a tiny actor gain made it crawl.
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.orthogonal_(module.weight, gain=1.0)
        nn.init.zeros_(module.bias)


def param_checksum(model: nn.Module) -> str:
    """sha256 over the parameters' bytes: equal on two ranks iff their parameters are bit-identical."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
