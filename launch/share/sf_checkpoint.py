"""A Sample Factory 2 checkpoint of a VizDoom agent as a checkpoint of ours (launch.import_sf).

Sample Factory 2.1.1 writes an experiment directory: config.json (its whole config) and
checkpoint_p0/checkpoint_<step>_<frames>.pth (best_*.pth: its best policy), a torch.save dict whose
"model" is the state dict of its ActorCriticSharedWeights. Where the architectures match, every
tensor has a place in our ActorCritic (nodes.models.actor_critic):

- encoder: its convnet_simple (32 8x8/4, 64 4x4/2, 128 3x3/2, ELU) and encoder_conv_mlp_layers
  [n] * k -> model.encoder=conv, model.fc_size=n, model.fc_layers=k; weights copied as they are;
- core: its one-layer nn.GRU / nn.LSTM of rnn_size -> our GRUCell / LSTMCell of model.hidden_size
  (the same gates in the same order); use_rnn=false -> model.core=none;
- heads: critic_linear -> critic; action_parameterization.distribution_linear -> actor, its rows put
  in the order of our action heads (`action_order`: the same buttons behind each logit);
- observation normaliser: it computes ((x - obs_subtract_mean) / obs_scale - mu) / sqrt(var + 1e-5),
  clipped to +-5; ours (x - M) / sqrt(V + model.obs_norm_eps), clipped to +-5. M = obs_subtract_mean +
  obs_scale mu, V = obs_scale^2 var and obs_norm_eps = obs_scale^2 1e-5 give the same function; the
  results differ by float32 rounding only (its float64 statistics are cast to float32 either way);
- return normaliser (normalize_returns): the learner's "returns" statistics, so the critic's
  outputs, which are in normalised units on both sides, keep their meaning.

Anything else (a measurements head, a decoder MLP, separate actor and critic weights, another
encoder, a wide frame) is refused in one line that names the key or the tensor.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass

import numpy as np

from nodes.errors import ConfigError, one_line

SF_EPS = 1e-5  # Sample Factory 2.1.1's normaliser epsilon (running_mean_std._NORM_EPS), fixed there
OBS_NORM = "obs_normalizer.running_mean_std.running_mean_std.obs."
RETURNS_NORM = "returns_normalizer."
ENCODER = "encoder.basic_encoder.enc."  # its VizdoomEncoder's image encoder
CONV_LAYERS = (0, 2, 4)  # the convolutions' places in both conv stacks (an activation after each)


@dataclass(frozen=True)
class Counterpart:
    """One of Sample Factory's VizDoom envs as one of ours: the env option, the overrides that draw
    what its .cfg draws (our options load the .cfg bundled with vizdoom, Sample Factory its own
    copy), and its action heads as the buttons each presses (option 0 of a head: none; option
    k: its k-th button), as its action space and .cfg define them."""

    env: str
    frames: tuple[str, ...]
    heads: tuple[tuple[str, ...], ...]


_TURN, _MOVE = ("TURN_LEFT", "TURN_RIGHT"), ("MOVE_FORWARD", "MOVE_BACKWARD")
# Sample Factory 2.1.1's env -> ours. Its .cfg copies show the status bar in basic and defend_*, and
# leave the screen flashes on where the bundled defend_* and health_gathering* turn them off.
SF_ENVS = {
    "doom_basic": Counterpart("doom_basic", ("env.render_hud=true",), (("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"),)),
    "doom_defend_the_center": Counterpart("doom_defend_the_center", ("env.render_hud=true",
                                          "env.render_screen_flashes=true"), (_TURN, ("ATTACK",))),
    "doom_defend_the_line": Counterpart("doom_defend_the_line", ("env.render_hud=true",
                                        "env.render_screen_flashes=true"), (_TURN, ("ATTACK",))),
    "doom_health_gathering": Counterpart("doom_health_gathering", ("env.render_screen_flashes=true",),
                                         (_TURN + _MOVE,)),
    "doom_health_gathering_supreme": Counterpart("doom_health_gathering_supreme", ("env.render_screen_flashes=true",),
                                                 (_TURN + _MOVE,)),
    "doom_my_way_home": Counterpart("doom_my_way_home", (), (_TURN, _MOVE)),
}


# ----------------------------------------------------------------------------- its experiment directory
def read_config(sf_dir: str) -> dict:
    """Its config.json (ConfigError, one line, when the directory or the file is not there)."""
    if not os.path.isdir(sf_dir):
        raise ConfigError(f"sf_dir={sf_dir}: no such directory (a Sample Factory experiment: train_dir/experiment)")
    path = os.path.join(sf_dir, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"sf_dir={sf_dir} is not a Sample Factory experiment: no config.json") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is unreadable: {one_line(exc)}") from None


def checkpoint_path(sf_dir: str, which: str) -> str:
    """The checkpoint `which` names: its latest (checkpoint_p0/checkpoint_*.pth by name, as Sample
    Factory finds it), its best (best_*.pth) or a file."""
    if which in ("latest", "best"):
        folder = os.path.join(sf_dir, "checkpoint_p0")
        found = sorted(glob.glob(os.path.join(folder, f"{'checkpoint' if which == 'latest' else 'best'}_*.pth")))
        if not found:
            raise ConfigError(f"checkpoint={which}: no {'checkpoint' if which == 'latest' else 'best'}_*.pth "
                              f"in {folder}")
        return found[-1]
    if not os.path.isfile(which):
        raise ConfigError(f"checkpoint={which}: no such file")
    return which


def _numpy_scalars() -> list:
    """The globals a numpy scalar in a pickle names (its best_performance is a numpy float64), for
    torch.load's weights-only unpickler: the scalar's constructor (numpy.core.multiarray.scalar in a
    file numpy 1 wrote, numpy._core.multiarray.scalar in one numpy 2 wrote) and the dtypes."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1
        from numpy.core import multiarray
    dtypes = [type(np.dtype(t)) for t in ("float64", "float32", "int64", "int32", "bool")]
    return [multiarray.scalar, (multiarray.scalar, "numpy.core.multiarray.scalar"), np.dtype, *dtypes]


def load_checkpoint(path: str) -> dict:
    """Its checkpoint dict, read as weights only (tensors, numbers, numpy scalars and dicts: nothing
    is executed)."""
    import torch
    try:
        with torch.serialization.safe_globals(_numpy_scalars()):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file
        raise ConfigError(f"{path} is not a readable Sample Factory checkpoint: {one_line(exc)}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise ConfigError(f"{path} is not a Sample Factory checkpoint (no 'model' state dict)")
    return state


# ----------------------------------------------------------------------------- its config as our overrides
def counterpart(sf_cfg: dict) -> Counterpart:
    env = sf_cfg.get("env")
    if env not in SF_ENVS:
        raise ConfigError(f"Sample Factory env '{env}' has no counterpart here (importable: {', '.join(SF_ENVS)})")
    return SF_ENVS[env]


def _need(sf_cfg: dict, key: str, ok, wants: str) -> None:
    if not ok(sf_cfg.get(key)):
        raise ConfigError(f"config.json: {key}={sf_cfg.get(key)!r} has no counterpart in our model (it needs {wants})")


def overrides(sf_cfg: dict) -> list[str]:
    """Our config overrides for its run: the env option (with what draws its frames) and the
    model's sizes and normaliser; ConfigError (one line, naming the key) for what does not map."""
    env = counterpart(sf_cfg)
    _need(sf_cfg, "actor_critic_share_weights", lambda v: v is True, "true: one encoder and core for both heads")
    _need(sf_cfg, "encoder_conv_architecture", lambda v: v == "convnet_simple", "convnet_simple")
    _need(sf_cfg, "nonlinearity", lambda v: v == "elu", "elu")
    _need(sf_cfg, "encoder_conv_mlp_layers", lambda v: isinstance(v, list) and v and len(set(v)) == 1,
          "one or more fully connected layers of one width")
    _need(sf_cfg, "decoder_mlp_layers", lambda v: not v, "[]: the heads read the core")
    _need(sf_cfg, "pixel_format", lambda v: v == "CHW", "CHW")
    _need(sf_cfg, "wide_aspect_ratio", lambda v: not v, "false: frames rendered at 160x120")
    _need(sf_cfg, "normalize_input_keys", lambda v: v is None or "obs" in v, "the pixels ('obs') normalised")
    use_rnn = sf_cfg.get("use_rnn", True)
    if use_rnn:
        _need(sf_cfg, "rnn_type", lambda v: v in ("gru", "lstm"), "gru or lstm")
        _need(sf_cfg, "rnn_num_layers", lambda v: v == 1, "1")
    fc = sf_cfg["encoder_conv_mlp_layers"]
    scale = float(sf_cfg.get("obs_scale", 1.0))
    # env.resize=floor: its frames come from OpenCV's nearest-neighbour resize, which takes the pixel
    # under each target pixel's top-left corner (ours by default: under its centre)
    return [f"env={env.env}", *env.frames, "env.resize=floor",
            f"env.width={int(sf_cfg.get('res_w', 128))}", f"env.height={int(sf_cfg.get('res_h', 72))}",
            f"env.frameskip={int(sf_cfg.get('env_frameskip', 4))}",
            "model=simplified", "model.encoder=conv", f"model.fc_size={fc[0]}", f"model.fc_layers={len(fc)}",
            f"model.core={sf_cfg['rnn_type'] if use_rnn else 'none'}", f"model.hidden_size={int(sf_cfg['rnn_size'])}",
            "model.measurements=false", f"model.obs_norm_eps={scale * scale * SF_EPS:.12g}",
            f"algo.normalize_returns={'true' if sf_cfg.get('normalize_returns') else 'false'}"]


# ----------------------------------------------------------------------------- actions
def _scenario_buttons(env_cfg) -> list:
    """Our env's buttons (vizdoom.Button), in its order: env.buttons, else its .cfg's (loading one
    starts no engine)."""
    import vizdoom

    from nodes.envs.doom import scenario_path
    if env_cfg.buttons:
        return [vizdoom.Button.__members__[b] for b in env_cfg.buttons]
    game = vizdoom.DoomGame()
    game.load_config(scenario_path(env_cfg))
    return list(game.get_available_buttons())


def _our_rows(env_cfg, buttons: list) -> list[tuple[int, tuple]]:
    """(head, the buttons it presses) of each of our logits, in the actor's order."""
    from nodes.envs.doom import action_heads
    if env_cfg.actions == "heads":
        mats = [m for _, m in action_heads(buttons)]
    else:  # single: none, then each button alone
        mats = [np.concatenate([np.zeros((1, len(buttons)), np.float32), np.eye(len(buttons), dtype=np.float32)])]
    return [(h, tuple(row)) for h, m in enumerate(mats) for row in m.tolist()]


def action_order(env_cfg, heads: tuple[tuple[str, ...], ...]) -> list[int]:
    """For each of our logits, the one of Sample Factory's that presses the same buttons
    (`heads`: its heads as button groups, Counterpart.heads); ConfigError (one line) when one of
    our heads has no head of its with the same options."""
    buttons = _scenario_buttons(env_cfg)
    index = {b.name: i for i, b in enumerate(buttons)}
    missing = [b for head in heads for b in head if b not in index]
    if missing:
        raise ConfigError(f"env={env_cfg.name} has no button {missing[0]}, which Sample Factory's agent presses "
                          f"(ours: {', '.join(index)})")
    theirs = []  # (head, the buttons it presses) of each of its logits
    for h, head in enumerate(heads):
        for option in (None, *head):
            row = np.zeros(len(buttons), np.float32)
            if option is not None:
                row[index[option]] = 1.0
            theirs.append((h, tuple(row.tolist())))
    ours = _our_rows(env_cfg, buttons)
    order = []
    for h in sorted({h for h, _ in ours}):
        rows = [r for g, r in ours if g == h]
        match = [g for g in range(len(heads)) if sorted(r for k, r in theirs if k == g) == sorted(rows)]
        if not match:
            raise ConfigError(f"env={env_cfg.name} (env.actions={env_cfg.actions}): our action head {h} presses "
                              f"what no head of Sample Factory's agent does (its heads: "
                              f"{' | '.join('none/' + '/'.join(hd) for hd in heads)})")
        order += [next(i for i, (k, r) in enumerate(theirs) if k == match[0] and r == row) for row in rows]
    return order


# ----------------------------------------------------------------------------- tensors
def _names(model) -> dict[str, str]:
    """Its tensor name -> ours, for the weights copied as they are (the actor's rows reordered)."""
    names = {f"{ENCODER}conv_head.{i}.{p}": f"encoder.conv.{i}.{p}" for i in CONV_LAYERS for p in ("weight", "bias")}
    fc_layers = sum(1 for n in model.state_dict() if n.startswith("encoder.fc.") and n.endswith(".weight"))
    names.update({f"{ENCODER}mlp_layers.{2 * k}.{p}": f"encoder.fc.{2 * k}.{p}"
                  for k in range(fc_layers) for p in ("weight", "bias")})
    if model.recurrent:
        names.update({f"core.core.{w}_l0": f"core.{w}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
    names.update({"critic_linear.weight": "critic.weight", "critic_linear.bias": "critic.bias",
                  "action_parameterization.distribution_linear.weight": "actor.weight",
                  "action_parameterization.distribution_linear.bias": "actor.bias"})
    return names


def _shape(t) -> str:
    return str([int(x) for x in t.shape])


def model_state(sf_model: dict, sf_cfg: dict, model, order: list[int], path: str) -> dict:
    """Our model's state dict from its ("model" of its checkpoint); ConfigError (one line, naming
    the tensor and both shapes) for a tensor that does not fit the model its config.json describes."""
    here = model.state_dict()
    names = _names(model)
    extra = [n for n in sf_model if n not in names and not n.startswith((OBS_NORM, RETURNS_NORM))]
    if extra:
        raise ConfigError(f"{path}: tensor {extra[0]} {_shape(sf_model[extra[0]])} has no counterpart in our model"
                          + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    out = {}
    for theirs, ours in names.items():
        if theirs not in sf_model:
            raise ConfigError(f"{path} lacks tensor {theirs}, which the model of its config.json has")
        t = sf_model[theirs]
        if t.shape != here[ours].shape:
            raise ConfigError(f"{path}: tensor {theirs} is {_shape(t)} where the model of its config.json "
                              f"(our {ours}) is {_shape(here[ours])}")
        out[ours] = (t[order] if ours.startswith("actor.") else t).float()
    out.update(_obs_norm(sf_model, sf_cfg, here["obs_norm.mean"].shape, path))
    missing = sorted(set(here) - set(out))
    if missing:
        raise ConfigError(f"our model has tensors the import does not fill: {', '.join(missing)}")
    return out


def _obs_norm(sf_model: dict, sf_cfg: dict, shape, path: str) -> dict:
    """Our observation normaliser's buffers for its (the module docstring's mapping)."""
    import torch
    scale, sub = float(sf_cfg.get("obs_scale", 1.0)), float(sf_cfg.get("obs_subtract_mean", 0.0))
    if not sf_cfg.get("normalize_input"):  # its pixels only shifted and scaled: var + eps = scale^2
        return {"obs_norm.mean": torch.full(shape, sub),
                "obs_norm.var": torch.full(shape, scale * scale * (1 - SF_EPS)), "obs_norm.count": torch.zeros(())}
    stats = {k: sf_model.get(OBS_NORM + k) for k in ("running_mean", "running_var", "count")}
    if any(v is None for v in stats.values()):
        raise ConfigError(f"{path} lacks the observation statistics {OBS_NORM}* its config.json's normalize_input "
                          "promises")
    if stats["running_mean"].shape != shape:
        raise ConfigError(f"{path}: tensor {OBS_NORM}running_mean is {_shape(stats['running_mean'])} where our "
                          f"frames (env.height x env.width) are {list(shape)}")
    mean, var = stats["running_mean"].double(), stats["running_var"].double()
    return {"obs_norm.mean": (sub + scale * mean).float(), "obs_norm.var": (scale * scale * var).float(),
            "obs_norm.count": stats["count"].double().reshape(()).float()}


def returns_state(sf_model: dict, path: str) -> dict:
    """Its return normaliser as the learner's "returns" statistics (a RunningNorm of shape ())."""
    stats = {k: sf_model.get(RETURNS_NORM + k) for k in ("running_mean", "running_var", "count")}
    if any(v is None for v in stats.values()):
        raise ConfigError(f"{path} lacks the return statistics {RETURNS_NORM}* its config.json's normalize_returns "
                          "promises")
    return {"mean": stats["running_mean"].reshape(()).float(), "var": stats["running_var"].reshape(()).float(),
            "count": stats["count"].double().reshape(()).float()}


def imported_state(sf_state: dict, sf_cfg: dict, cfg, path: str) -> dict:
    """The checkpoint of ours (nodes.record.checkpoint's format) that holds its agent: our model for
    `cfg` (the composed config of `overrides`) with its weights and statistics, the learner's return
    statistics, and a fresh optimizer, so that launch.train can go on from it as from a run's own."""
    from nodes.envs import env_spec
    from nodes.learning.learner import make_optimizer
    from nodes.models.actor_critic import ActorCritic
    model = ActorCritic(env_spec(cfg.env), cfg.model)
    order = action_order(cfg.env, counterpart(sf_cfg).heads)
    model.load_state_dict(model_state(sf_state["model"], sf_cfg, model, order, path))
    state = {"model": model.state_dict(), "model_identity": model.identity(),
             "optimizer": make_optimizer(model, cfg.algo).state_dict(),
             "policy_version": int(sf_state.get("train_step", 0)), "env_frames": int(sf_state.get("env_steps", 0)),
             "iterations": 0, "episodes": 0, "recent_rewards": [],
             "imported_from": {"sample_factory": os.path.abspath(path), "env": sf_cfg.get("env")}}
    if cfg.algo.normalize_returns:
        state["returns"] = returns_state(sf_state["model"], path)
    return state
