"""Actor-critic models: encoder (+ measurements) -> core -> actor heads and critic.

conf/model/ selects them (every shape comes from the env spec, none is hand-set):
- simplified: the Sample Factory paper's encoder, sized as Sample Factory 2 sizes it: conv 32
  8x8/4, 64 4x4/2, 128 3x3/2 (ELU), fc 512 (ELU), GRU 512, linear actor and critic heads;
- full: the same plus a measurements MLP (game variables) joined before the core;
- impala: the IMPALA ResNet encoder with an LSTM core;
- model.encoder=nature: DQN's conv stack with ReLU (Sample Factory 2's Atari encoder);
- vector observations get a two-layer MLP encoder (encoder=auto picks it).
Multi-head actions (a tuple of discrete heads) are L independent linear heads over one output;
continuous actions (a Box) are Gaussian: D means from the same linear layer, a learned
state-independent log-std per dim.

The same recurrent cell serves the policy worker (one step) and the learner (BPTT over the rollout),
so behaviour and learner log-probabilities agree to float precision at equal parameters.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sys

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
        moments = self.moments(x)
        self.fold(all_sum(moments) if all_sum is not None else moments)

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
        return (x - self.mean) * torch.rsqrt(self.var + 1e-5)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sqrt(self.var + 1e-5) + self.mean

    def forward(self, x: torch.Tensor, memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """(x - mean) / std, clipped, as float32 in `memory_format`. One float copy (converting the
        layout on the way), then one fused multiply-add and the clip in place: on a learner batch of
        pixels each pass is 100+ MB, and each new tensor cost as much as its arithmetic."""
        y = x.to(torch.float32, memory_format=memory_format, copy=True)
        scale = torch.rsqrt(self.var + 1e-5)
        return torch.addcmul(-self.mean * scale, y, scale, out=y).clamp_(-self.clip, self.clip)


def batch_moments(updates: list[tuple[RunningNorm, torch.Tensor]]) -> torch.Tensor:
    """Several norms' batch moments in one vector (summed over nodes as one: the learner hands it
    to the gradient all-reduce, since each collective costs the ring's latency at scale)."""
    return torch.cat([norm.moments(x) for norm, x in updates])


def fold_moments(updates: list[tuple[RunningNorm, torch.Tensor]], moments: torch.Tensor) -> None:
    """Fold `batch_moments(updates)` (summed over nodes or not) into each norm."""
    sizes = [1 + 2 * norm.mean.numel() for norm, _ in updates]
    for (norm, _), m in zip(updates, moments.split(sizes)):
        norm.fold(m)


def fold_all(updates: list[tuple[RunningNorm, torch.Tensor]], all_sum=None) -> None:
    """Fold a batch into several running norms, their moments summed by `all_sum` in one call."""
    moments = batch_moments(updates)
    fold_moments(updates, all_sum(moments) if all_sum is not None else moments)


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


class MLPEncoder(nn.Module):
    def __init__(self, obs_shape, fc_size: int, fc_layers: int = 1):  # always two layers
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_shape[0], fc_size), nn.ELU(), nn.Linear(fc_size, fc_size), nn.ELU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


ENCODERS = {"conv": ConvEncoder, "nature": NatureEncoder, "impala": ImpalaEncoder, "mlp": MLPEncoder}
IMAGE_STATS_EVERY = 8  # pixel statistics from every 8th step of each trajectory (ActorCritic.update_norms)
MEAS_SIZE = 128  # width of the measurements MLP of the "full" model


def _fc_stack(width_in: int, fc_size: int, layers: int, activation) -> nn.Sequential:
    """`layers` fully connected layers of fc_size, each followed by a fresh `activation()`."""
    out = []
    for i in range(layers):
        out += [nn.Linear(width_in if i == 0 else fc_size, fc_size), activation()]
    return nn.Sequential(*out)


def _flat_size(conv: nn.Module, obs_shape) -> int:
    with torch.no_grad():
        return conv(torch.zeros(1, *obs_shape)).shape[1]


class ActionHeads:
    """Discrete heads and continuous (Gaussian) dims, read from one tensor of action parameters.

    Layout along the last axis: the logits of each discrete head, then the D means, then the D
    log-stds (the model appends its state-independent log-std parameter: ActorCritic). A step's
    action is one float32 entry per discrete head (its index, exact in float32) then one per
    continuous dim (an unbounded sample: the env wrapper clips it to the bounds, and the log-prob
    stays that of the unclipped sample, as in Sample Factory and CleanRL). The joint
    log-probability and entropy are sums over heads and dims, so the learner never needs to know
    how many there are or of which kind.
    """

    def __init__(self, sizes, continuous: int = 0):
        self.sizes = [int(n) for n in sizes]
        self.continuous = int(continuous)
        self.num_logits = sum(self.sizes)
        self.width = self.num_logits + 2 * self.continuous  # of the action parameters

    def split(self, params: torch.Tensor):
        """Each discrete head's log-probabilities (none when there are no discrete heads)."""
        logits = params[..., : self.num_logits] if self.continuous else params
        return [torch.log_softmax(x, -1) for x in logits.split(self.sizes, -1)] if self.sizes else []

    def gaussian(self, params: torch.Tensor):
        """(means, log-stds) of the continuous dims."""
        n, d = self.num_logits, self.continuous
        return params[..., n : n + d], params[..., n + d :]

    def sample(self, params: torch.Tensor, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """One action per head and dim: [..., heads + dims] float32 (any batch shape). uniforms: the
        U(0,1) draws to use, [..., sum(sizes) + dims] (sampler.mode=deterministic: drawn per env
        from the env's own stream); None: torch's generator of this process. A discrete head takes
        the Gumbel-max of its logits; a continuous dim mean + std * z with z = ndtri(u), the
        inverse normal CDF, so one uniform per dim decides it."""
        out = []
        n = self.num_logits
        if self.sizes:
            u_logits = None if uniforms is None else (uniforms[..., :n] if self.continuous else uniforms)
            out.append(self._gumbel_max(self.split(params), u_logits).to(torch.float32))
        if self.continuous:
            mean, log_std = self.gaussian(params)
            if uniforms is None:
                z = torch.randn_like(mean)
            else:  # ndtri(0) and ndtri(1) are infinite
                z = torch.special.ndtri(uniforms[..., n:].to(mean.dtype).clamp(1e-6, 1.0 - 1e-6))
            out.append(mean + log_std.exp() * z)
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def _gumbel_max(self, split, uniforms: torch.Tensor | None) -> torch.Tensor:
        """[..., heads] int64: each discrete head's Gumbel-max sample."""
        out = []
        u_heads = uniforms.split(self.sizes, -1) if uniforms is not None else [None] * len(self.sizes)
        for logp, u in zip(split, u_heads):
            u = (torch.rand_like(logp) if u is None else u.to(logp.dtype)).clamp(1e-10, 1.0)
            out.append((logp - torch.log(-torch.log(u))).argmax(-1))
        return torch.stack(out, -1)

    def greedy(self, params: torch.Tensor) -> torch.Tensor:
        """Each discrete head's most likely action and each continuous dim's mean."""
        out = []
        if self.sizes:
            out.append(torch.stack([logp.argmax(-1) for logp in self.split(params)], -1).to(torch.float32))
        if self.continuous:
            out.append(self.gaussian(params)[0])
        return out[0] if len(out) == 1 else torch.cat(out, -1)

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.log_prob_and_entropy(params, actions)[0]

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        parts = []
        if self.sizes:
            parts.append(self._entropy(self.split(params)))
        if self.continuous:
            parts.append(_gaussian_entropy(self.gaussian(params)[1]))
        return parts[0] if len(parts) == 1 else parts[0] + parts[1]

    def log_prob_and_entropy(self, params: torch.Tensor, actions: torch.Tensor):
        """Both from one log-softmax per discrete head (the learner needs both)."""
        logp, entropy = [], []
        if self.sizes:
            split = self.split(params)
            logp.append(self._log_prob(split, actions))
            entropy.append(self._entropy(split))
        if self.continuous:
            mean, log_std = self.gaussian(params)
            logp.append(_gaussian_log_prob(mean, log_std, actions[..., len(self.sizes) :]))
            entropy.append(_gaussian_entropy(log_std))
        if len(logp) == 1:
            return logp[0], entropy[0]
        return logp[0] + logp[1], entropy[0] + entropy[1]

    @staticmethod
    def _log_prob(split, actions: torch.Tensor) -> torch.Tensor:
        # actions are float32 in the buffers: indices go back to int64 for gather (a no-op on int64)
        parts = [logp.gather(-1, actions[..., i : i + 1].long()).squeeze(-1) for i, logp in enumerate(split)]
        return torch.stack(parts, 0).sum(0)

    @staticmethod
    def _entropy(split) -> torch.Tensor:
        return torch.stack([-(logp.exp() * logp).sum(-1) for logp in split], 0).sum(0)


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Summed over dims: the Normal log-density, written with the log-std (torch.distributions.Normal's
    formula with var = exp(2 log std); equal to float rounding)."""
    var = (2 * log_std).exp()
    return (-((actions - mean) ** 2) / (2 * var) - log_std - _HALF_LOG_2PI).sum(-1)


def _gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Summed over dims: each Normal's entropy, 1/2 + 1/2 log(2 pi) + log std."""
    return (0.5 + _HALF_LOG_2PI + log_std).sum(-1)


class ActorCritic(nn.Module):
    """encoder (+ measurements MLP) -> core (GRU, LSTM or none) -> actor heads and critic.

    The recurrent state is one flat vector per env (`state_size`): h for a GRU, [h, c] for an
    LSTM, so buffers and policy workers handle every core alike.
    """

    def __init__(self, spec, model_cfg):
        super().__init__()
        kind = model_cfg.encoder
        if kind == "auto":
            kind = "conv" if spec.is_image else "mlp"
        # Observations stay uint8 in the buffers (4x less memory); they become floats here.
        self.obs_norm = RunningNorm(spec.obs_shape)
        self.encoder = ENCODERS[kind](spec.obs_shape, model_cfg.fc_size, model_cfg.fc_layers)
        width = model_cfg.fc_size
        # The "full" model: game variables (health, ammo, ...) through their own MLP, joined
        # with the image features before the core. Their scales differ wildly (health 100,
        # kills 1), so they are normalised like the pixels.
        self.use_meas = bool(model_cfg.measurements) and spec.meas_size > 0
        if self.use_meas:
            self.meas_norm = RunningNorm((spec.meas_size,))
            self.meas_mlp = nn.Sequential(nn.Linear(spec.meas_size, MEAS_SIZE), nn.ELU(),
                                          nn.Linear(MEAS_SIZE, MEAS_SIZE), nn.ELU())
            width += MEAS_SIZE
        self.core_kind = model_cfg.core
        self.recurrent = self.core_kind != "none"
        hidden = model_cfg.hidden_size
        if self.core_kind == "gru":
            self.core, self.state_size = nn.GRUCell(width, hidden), hidden
        elif self.core_kind == "lstm":
            self.core, self.state_size = nn.LSTMCell(width, hidden), 2 * hidden
        else:
            self.core, self.state_size = None, 1
        out = hidden if self.recurrent else width
        self.heads = ActionHeads(spec.action_heads, spec.continuous)
        # the discrete heads' logits, then the continuous dims' means
        self.actor = nn.Linear(out, self.heads.num_logits + spec.continuous)
        self.critic = nn.Linear(out, 1)
        # Continuous dims: a learned log-std per dim that does not depend on the state, 0 at the
        # start (std 1: Sample Factory's default, and CleanRL's); none without continuous dims, so
        # a discrete model's parameters (and checksums) are what they were
        if spec.continuous:
            self.action_log_std = nn.Parameter(torch.zeros(spec.continuous))
        else:
            self.register_parameter("action_log_std", None)
        self.apply(_init)
        # Convolutions in channels-last layout (weights here, activations in _features): oneDNN's
        # CPU kernels ran the simplified encoder's forward + backward 22% faster that way here
        # (batch 1056: 0.97 -> 0.76 s), and it is cuDNN's preferred layout too. Values, state
        # dicts, checksums and the flat weights hand-off are layout-blind (logical order).
        self.channels_last = spec.is_image and len(spec.obs_shape) == 3
        if self.channels_last:
            self.encoder.to(memory_format=torch.channels_last)

    def _features(self, obs: torch.Tensor, meas: torch.Tensor) -> torch.Tensor:
        # pixels become float in channels-last layout (one copy for both), which the convolutions keep
        layout = torch.channels_last if self.channels_last else torch.preserve_format
        x = self.encoder(self.obs_norm(obs, layout))
        if self.use_meas:
            x = torch.cat([x, self.meas_mlp(self.meas_norm(meas))], -1)
        return x

    def _core(self, x: torch.Tensor, state: torch.Tensor):
        """(output, new flat state) for one step."""
        if self.core_kind == "gru":
            h = self.core(x, state)
            return h, h
        h, c = self.core(x, state.chunk(2, -1))
        return h, torch.cat([h, c], -1)

    def step(self, obs: torch.Tensor, meas: torch.Tensor, state: torch.Tensor):
        """One step for a batch of envs: (action parameters, value, new recurrent state)."""
        x = self._features(obs, meas)
        if self.recurrent:
            x, state = self._core(x, state)
        # action parameters and values in fp32 whatever the autocast precision: the importance ratio
        # of the policy worker's and the learner's log-probs must not pick up rounding noise
        return self._action_params(x), self.critic(x).squeeze(-1).float(), state.float()

    def _action_params(self, x: torch.Tensor) -> torch.Tensor:
        """The actor's output as ActionHeads reads it: logits and means, then the log-stds repeated
        for every row (one tensor for the policy worker, the learner and their log-probs)."""
        out = self.actor(x).float()
        if self.action_log_std is None:
            return out
        return torch.cat([out, self.action_log_std.float().expand(*out.shape[:-1], -1)], -1)

    def unroll(self, obs: torch.Tensor, meas: torch.Tensor, state0: torch.Tensor, dones: torch.Tensor):
        """BPTT over trajectories. obs [B, T+1, ...], meas [B, T+1, M], state0 [B, S], dones [B, T]
        (done after step t). Returns action parameters [B, T+1, heads.width] and values [B, T+1];
        step T only serves the bootstrap value."""
        b, t1 = obs.shape[:2]
        x = self._features(obs.reshape(b * t1, *obs.shape[2:]), meas.reshape(b * t1, -1)).view(b, t1, -1)
        if self.core_kind == "gru":
            x = self._gru_unroll(x, state0, 1.0 - dones.float())
        elif self.recurrent:
            keep = 1.0 - dones.float()
            state, outs = state0, []
            for t in range(t1):
                out, state = self._core(x[:, t], state)
                outs.append(out)
                if t < t1 - 1:
                    state = state * keep[:, t : t + 1]  # a new episode starts from a zero state
            x = torch.stack(outs, 1)
        return self._action_params(x), self.critic(x).squeeze(-1).float()

    def _gru_unroll(self, x: torch.Tensor, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """nn.GRUCell's equations over [B, T+1, F] inputs, with the input projection of every step
        in one matrix product (forward and backward) instead of one small one per step: the
        step-by-step cell spent most of its time in 33 products of 32 rows each. keep [B, T]: 0
        where an episode ended after step t (the next step starts from a zero state). The policy
        worker's single steps use nn.GRUCell on the same weights: equal to float rounding."""
        cell = self.core
        gi = nn.functional.linear(x, cell.weight_ih, cell.bias_ih)  # [B, T+1, 3H]
        i_r, i_z, i_n = gi.chunk(3, -1)
        outs = []
        for t in range(x.shape[1]):
            h_r, h_z, h_n = nn.functional.linear(h, cell.weight_hh, cell.bias_hh).chunk(3, -1)
            r = torch.sigmoid(i_r[:, t] + h_r)
            z = torch.sigmoid(i_z[:, t] + h_z)
            n = torch.tanh(i_n[:, t] + r * h_n)
            h = n + z * (h - n)  # (1 - z) n + z h
            outs.append(h)
            if t < x.shape[1] - 1:
                h = h * keep[:, t : t + 1]
        return torch.stack(outs, 1)

    def norm_updates(self, obs: torch.Tensor, meas: torch.Tensor) -> list[tuple[RunningNorm, torch.Tensor]]:
        """What a batch [B, T, ...] folds into the running statistics (batch_moments). Of pixels, every
        IMAGE_STATS_EVERY-th step of each trajectory: a learner batch of VizDoom frames is 28 M
        values, and their moments (then in float64) cost a seventh of the learner's step; a per-pixel mean
        over hundreds of steps of 128+ frames each is as good as over 1024 each."""
        if obs.dim() > 3:
            obs = obs[:, ::IMAGE_STATS_EVERY]
        return [(self.obs_norm, obs)] + ([(self.meas_norm, meas)] if self.use_meas else [])

    def update_norms(self, obs: torch.Tensor, meas: torch.Tensor, all_sum=None) -> None:
        fold_all(self.norm_updates(obs, meas), all_sum)


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


def autocast(device: torch.device | str, precision: str):
    """The forward passes' precision (train.precision), the same in the policy workers and the
    learner: fp32, or bf16 autocast (matmuls and convolutions; on CPUs with bf16 units and on
    GPUs). Logits and values leave the model in fp32 either way."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def deterministic_kernels() -> None:
    """sampler.mode=deterministic: ask torch for deterministic kernels (on CPU ours already are;
    on CUDA cuBLAS needs its workspace fixed before the first call, and an op without a
    deterministic kernel warns rather than stopping the run). Call before CUDA is first used.

    torch.use_deterministic_algorithms also sets TorchInductor's `deterministic` flag, and imports
    torch._inductor.config for it (with torch._dynamo: ~850 modules, 1.9 s of the node's and of
    every policy worker's start on the 2-core AMD VM) for a compiler the trainer never uses
    (nodes/learning/adam.py avoids that import too). So the flag torch's kernels read is set directly, and
    Inductor's only where something already imported it. tests/test_models.py checks the flags
    and that nothing imported the compiler."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True
    torch._C._set_deterministic_algorithms(True, warn_only=True)
