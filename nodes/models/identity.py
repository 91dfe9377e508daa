"""What a model reads and with what, as its checkpoint records it: a checkpoint of another model is
refused by name (one line) rather than by a tensor's shape. No torch here: the launcher checks a
resume with it before anything imports torch."""
from __future__ import annotations

from nodes.errors import CheckpointError


def model_identity(spec, model_cfg) -> str:
    """"encoder built-in | pkg.module:Class on <the observation keys, or obs (+ meas)>"."""
    custom = ":" in model_cfg.encoder
    if spec.keys:
        seen = ", ".join(f"{k.name} {k.kind} {[int(x) for x in k.shape]}" for k in spec.keys)
    else:
        meas = spec.meas_size > 0 and (bool(model_cfg.measurements) or custom)
        seen = f"obs {[int(x) for x in spec.obs_shape]}" + (f", meas [{int(spec.meas_size)}]" if meas else "")
    return f"encoder {model_cfg.encoder if custom else 'built-in'} on {seen}"


def check_identity(identity: str, saved: str | None, path: str) -> None:
    """CheckpointError (one line) when a checkpoint's model (its identity; None: a checkpoint from
    before they were recorded, accepted) is not `identity`."""
    if saved is not None and saved != identity:
        raise CheckpointError(f"checkpoint {path} holds a model with {saved}; this run builds one with {identity}")
