"""Actor-critic models: encoder (+ measurements) -> core -> actor heads and critic.

conf/model/ selects them (every shape comes from the env spec, none is hand-set):
- simplified: the Sample Factory paper's encoder, sized as Sample Factory 2 sizes it: conv 32
  8x8/4, 64 4x4/2, 128 3x3/2 (ELU), fc 512 (ELU), GRU 512, linear actor and critic heads;
- full: the same plus a measurements MLP (game variables) joined before the core;
- impala: the IMPALA ResNet encoder with an LSTM core;
- model.encoder=nature: DQN's conv stack with ReLU (Sample Factory 2's Atari encoder);
- vector observations get a two-layer MLP encoder (encoder=auto picks it).
The encoders are in nodes.models.encoders, the action distribution in nodes.models.heads.

The same recurrent cell serves the policy worker (one step) and the learner (BPTT over the rollout),
so behaviour and learner log-probabilities agree to float precision at equal parameters.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from nodes.errors import ConfigError, one_line
from nodes.models.encoders import ENCODERS
from nodes.models.heads import ActionHeads
from nodes.models.identity import check_fit, model_identity
from nodes.models.inputs import KeyedEncoder, build_custom, split_inputs
from nodes.models.normalisers import RunningNorm, stats_steps

MEAS_SIZE = 128  # width of the measurements MLP of the "full" model


class ActorCritic(nn.Module):
    """encoder (+ measurements MLP) -> core (GRU, LSTM or none) -> actor heads and critic.

    The recurrent state is one flat vector per env (`state_size`): h for a GRU, [h, c] for an
    LSTM, so buffers and policy workers handle every core alike.
    """

    def __init__(self, spec, model_cfg):
        super().__init__()
        self.spec = spec
        self._identity = model_identity(spec, model_cfg)
        self.custom = ":" in model_cfg.encoder  # the user's encoder class (nodes.models.inputs)
        # What reads the observation: the user's encoder, one encoder per named key
        # (spec.keys: a gymnasium Dict, image or categorical observation), or (None) the plain
        # pair's own below, whose module names every checkpoint of a shipped env holds
        self.inputs = None
        self.use_meas = False
        if self.custom:
            self.inputs = build_custom(spec, model_cfg)
            width = self.inputs.out_size
        elif spec.keys:
            self.inputs = KeyedEncoder(spec, model_cfg)
            width = self.inputs.out_size
        else:
            width = self._plain_encoder(spec, model_cfg)
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
        # Continuous dims: a learned log-std per dim that does not depend on the state, log of
        # model.action_std at the start (1: Sample Factory's default, and CleanRL's); none without
        # continuous dims, so a discrete model's parameters (and checksums) are what they were
        if spec.continuous:
            self.action_log_std = nn.Parameter(torch.full((spec.continuous,), math.log(model_cfg.action_std)))
        else:
            self.register_parameter("action_log_std", None)
        self._initialise(model_cfg.init, spec.continuous)
        # Convolutions in channels-last layout (weights here, activations in _features): oneDNN's
        # CPU kernels run the simplified encoder's forward + backward faster that way
        # (docs/benchmarks.md#figures-behind-the-codes-choices), and it is cuDNN's preferred layout too. Values, state
        # dicts, checksums and the flat weights hand-off are layout-blind (logical order).
        self.channels_last = self.inputs is None and spec.is_image and len(spec.obs_shape) == 3
        if self.channels_last:
            self.encoder.to(memory_format=torch.channels_last)
        elif isinstance(self.inputs, KeyedEncoder):
            self.inputs.to_channels_last()

    def identity(self) -> str:
        """The line its checkpoints record (nodes.models.identity)."""
        return self._identity.line

    def check_fit(self, saved: str | None, saved_tensors: dict, path: str) -> None:
        """CheckpointError (one line: what changed) unless a checkpoint's model, its identity
        `saved` and its state dict, fits this one (nodes.models.identity.check_fit)."""
        check_fit(self._identity, saved, path, saved_tensors, self.state_dict())

    def _plain_encoder(self, spec, model_cfg) -> int:
        """The plain pair's encoder (+ measurements MLP); returns the features' width."""
        kind = model_cfg.encoder
        if kind == "auto":
            kind = "conv" if spec.is_image else "mlp"
        # Observations stay uint8 in the buffers (4x less memory); they become floats here.
        self.obs_norm = RunningNorm(spec.obs_shape, eps=model_cfg.obs_norm_eps)
        extra = {"activation": model_cfg.mlp_activation} if kind == "mlp" else {}
        self.encoder = ENCODERS[kind](spec.obs_shape, model_cfg.fc_size, model_cfg.fc_layers, **extra)
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
        return width

    def _initialise(self, init: str, continuous: int) -> None:
        """model.init: orthogonal | orthogonal_heads | torch_default (every layer as PyTorch made it)."""
        if init == "orthogonal_heads":
            # Sample Factory 2.1.1's orthogonal init as it happens: its encoder is TorchScript, whose
            # layers its `type(layer) == nn.Conv2d` test misses, so only the heads become orthogonal;
            # the encoder keeps PyTorch's weights (rows of norm ~0.58 against orthogonal's 1) with its
            # biases zeroed, the core PyTorch's own (benchmarks/learner_step_vs_sf.py measured it)
            # (a custom encoder keeps what its author gave it, biases included)
            encoders = [] if self.custom else [self.inputs] if self.inputs is not None else [self.encoder]
            for module in [m for e in encoders for m in e.modules()] + list(
                    self.meas_mlp.modules() if self.use_meas else []):
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    nn.init.zeros_(module.bias)
            _init(self.actor)
            _init(self.critic)
        elif init == "orthogonal":
            # every built-in layer; a custom encoder keeps the initialisation its author gave it
            for name, module in self.named_children():
                if not (self.custom and name == "inputs"):
                    module.apply(_init)
        if init != "torch_default" and continuous:
            # The Gaussian means start near 0 (the rows of the actor that give them: gain 0.01,
            # as CleanRL's and Stable-Baselines3's PPO): at gain 1 they start at about +-0.5
            # (std 0.66 on unit-normal inputs), a control cost on top of the spread's, and
            # Ant-v5 learned to fall over at once (issue 52: mean return over 0.5-1M steps -8
            # at gain 1, 382 at 0.01 with nothing else changed;
            # docs/environments.md#ant-the-die-early-optimum)
            with torch.no_grad():
                nn.init.orthogonal_(self.actor.weight[self.heads.num_logits:], gain=0.01)

    def _features(self, obs: torch.Tensor, meas: torch.Tensor) -> torch.Tensor:
        if self.custom:
            return self.inputs(split_inputs(self.spec, obs, meas))
        if self.inputs is not None:
            return self.inputs(obs, meas)
        # pixels become float in channels-last layout (one copy for both), which the convolutions keep
        x = self.encoder(self.obs_norm.images(obs) if self.channels_last else self.obs_norm(obs))
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
        # one view per step: their gradients are stacked once in the backward, where indexing gi
        # step by step made each step's backward fill and add a whole [B, T+1, H] gradient
        steps = gi.unbind(1)
        outs = []
        for t, gi_t in enumerate(steps):
            i_r, i_z, i_n = gi_t.chunk(3, -1)
            h_r, h_z, h_n = nn.functional.linear(h, cell.weight_hh, cell.bias_hh).chunk(3, -1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = n + z * (h - n)  # (1 - z) n + z h
            outs.append(h)
            if t < x.shape[1] - 1:
                h = h * keep[:, t : t + 1]
        return torch.stack(outs, 1)

    def norm_updates(self, obs: torch.Tensor, meas: torch.Tensor) -> list[tuple[RunningNorm, torch.Tensor]]:
        """What a batch [B, T, ...] folds into the running statistics (batch_moments). Of pixels, the
        steps `stats_steps` takes (nodes.models.normalisers)."""
        if self.custom:
            own = getattr(self.inputs, "norm_updates", None)
            return list(own(split_inputs(self.spec, obs.flatten(0, 1), meas.flatten(0, 1)))) if own else []
        if self.inputs is not None:
            return self.inputs.norm_updates(obs, meas)
        return [(self.obs_norm, stats_steps(obs))] + ([(self.meas_norm, meas)] if self.use_meas else [])


def check_model(spec, model_cfg) -> None:
    """Refuse (one line) a model that cannot read this env's observation, or whose encoder gives
    other features than it declares: it is built once on the CPU and run on a batch of two zero
    observations. Not the shipped envs' plain models at model.encoder=auto: their shapes are the
    tests', and the build would add to every launch's start-up; an encoder named by hand is checked as a
    custom one is (mlp on an image fails only at its first forward)."""
    if not spec.keys and model_cfg.encoder == "auto":
        return
    try:
        model = ActorCritic(spec, model_cfg)
    except ConfigError:
        raise
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:  # a shape no layer takes
        if spec.keys or model_cfg.encoder not in ENCODERS:
            raise ConfigError(f"model={model_cfg.name} (model.encoder={model_cfg.encoder}) cannot be built for this "
                              f"env's observation: {one_line(exc)}") from None
        raise _cannot_read(spec, model_cfg, exc) from None
    obs = torch.zeros(2, *spec.obs_shape, dtype=torch.uint8 if spec.obs_dtype == np.uint8 else torch.float32)
    meas = torch.zeros(2, spec.meas_size)
    try:
        with torch.no_grad():
            if not model.custom:
                model.step(obs, meas, torch.zeros(2, model.state_size))
                return
            out = model.inputs(split_inputs(spec, obs, meas))
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises, one line
        if not model.custom:
            raise _cannot_read(spec, model_cfg, exc) from None
        raise ConfigError(f"model.encoder '{model_cfg.encoder}': {type(exc).__name__} in forward on a batch "
                          f"of zero observations: {one_line(exc)}") from None
    if tuple(out.shape) != (2, model.inputs.out_size):
        raise ConfigError(f"model.encoder '{model_cfg.encoder}' declares out_size={model.inputs.out_size} but its "
                          f"forward gave {tuple(out.shape)} for a batch of 2 (expected (2, {model.inputs.out_size}))")


def _cannot_read(spec, model_cfg, exc: BaseException) -> ConfigError:
    """A shipped encoder that the env's plain observation does not fit: which one takes it."""
    image = spec.is_image and len(spec.obs_shape) == 3
    what = f"a {'x'.join(map(str, spec.obs_shape))} image" if image else f"a vector of {int(np.prod(spec.obs_shape))}"
    takes = ": an image takes model.encoder=auto, conv, nature or impala" if image and model_cfg.encoder == "mlp" \
        else ": a vector takes model.encoder=auto or mlp" if not image and model_cfg.encoder != "mlp" else ""
    return ConfigError(f"model.encoder={model_cfg.encoder} cannot read this env's observation, {what}{takes} "
                       f"({type(exc).__name__}: {one_line(exc)})")


def _init(module: nn.Module) -> None:
    # Orthogonal weights with gain 1 and zero biases for conv and linear layers (heads included);
    # the GRU keeps PyTorch's own initialisation. Sample Factory's settings as its config names them
    # (policy_initialization=orthogonal, gain 1); what its code does with them is orthogonal_heads
    # (ActorCritic._initialise). A larger gain made the policy collapse early, a tiny actor gain
    # made it crawl.
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.orthogonal_(module.weight, gain=1.0)
        nn.init.zeros_(module.bias)
