"""What a model reads and what it acts with, as its checkpoint records it: a checkpoint of another
model is refused in one line that says what changed, rather than by a tensor's shape. No torch
here: the launcher checks a resume with it before anything imports torch.

The line a checkpoint records (`Identity.line`) is made of parts, "label: value" joined by "; ",
so that two are compared part by part:

    encoder: built-in; observation 'direction': categorical [] of 4 classes; observation 'image':
    pixels [3, 7, 7]; actions: Discrete(3)

Checkpoints written before the number of classes and the actions were recorded hold the line of
then (`Identity.legacy`: "encoder built-in on direction categorical [], image pixels [3, 7, 7]"),
still accepted: a changed number of classes or actions then shows in the tensors' shapes, which a
model checks too (`check_fit`).
"""
from __future__ import annotations

from dataclasses import dataclass

from nodes.envs.observations import CATEGORICAL
from nodes.errors import CheckpointError

SEP = "; "  # between the parts of a line
SHOWN = 4  # tensors named in a misfit's line; the others are counted


@dataclass(frozen=True)
class Identity:
    """A model's identity: the line its checkpoints record, and the line of before (still accepted)."""

    line: str
    legacy: str

    def fits(self, saved: str | None) -> bool:
        """A checkpoint's identity (None: one from before they were recorded) is this model's."""
        return saved is None or saved in (self.line, self.legacy)


def model_identity(spec, model_cfg) -> Identity:
    parts = [("encoder", _encoder(model_cfg)), *_observations(spec, model_cfg), ("actions", _actions(spec))]
    return Identity(SEP.join(f"{label}: {value}" for label, value in parts), _legacy_line(spec, model_cfg))


def _encoder(model_cfg) -> str:
    return model_cfg.encoder if ":" in model_cfg.encoder else "built-in"


def _shape(shape) -> str:
    return str([int(x) for x in shape])


def _uses_meas(spec, model_cfg) -> bool:
    return spec.meas_size > 0 and (bool(model_cfg.measurements) or ":" in model_cfg.encoder)


def _observations(spec, model_cfg) -> list[tuple[str, str]]:
    if spec.keys:
        return [(f"observation '{k.name}'", f"{k.kind} {_shape(k.shape)}"
                 + (f" of {int(k.classes)} classes" if k.kind == CATEGORICAL else "")) for k in spec.keys]
    parts = [("observation", _shape(spec.obs_shape))]
    return parts + ([("measurements", f"[{int(spec.meas_size)}]")] if _uses_meas(spec, model_cfg) else [])


def _actions(spec) -> str:
    """In gymnasium's words: Discrete(n) for one discrete head, MultiDiscrete([...]) for several,
    Box(n) for n continuous dims (their bounds clip actions, they shape no tensor)."""
    heads = [int(n) for n in spec.action_heads]
    parts = [f"Discrete({heads[0]})" if len(heads) == 1 else f"MultiDiscrete({heads})"] if heads else []
    return " + ".join(parts + ([f"Box({spec.continuous})"] if spec.continuous else []))


def _legacy_line(spec, model_cfg) -> str:
    """The line checkpoints recorded before the classes and the actions were: "encoder built-in |
    pkg.module:Class on <the observation keys, or obs (+ meas)>"."""
    if spec.keys:
        seen = ", ".join(f"{k.name} {k.kind} {_shape(k.shape)}" for k in spec.keys)
    else:
        meas = f", meas [{int(spec.meas_size)}]" if _uses_meas(spec, model_cfg) else ""
        seen = f"obs {_shape(spec.obs_shape)}{meas}"
    return f"encoder {_encoder(model_cfg)} on {seen}"


def _parts(line: str) -> dict[str, str] | None:
    """label -> value of an identity line; None for a line of before (not made of parts)."""
    if not line.startswith("encoder: "):
        return None
    return dict(part.partition(": ")[::2] for part in line.split(SEP))


def _changes(saved: str, identity: Identity) -> str:
    """What differs between a checkpoint's identity line and this model's, checkpoint -> this run."""
    old, new = _parts(saved), _parts(identity.line)
    if old is None or new is None:  # a line of before: whole, beside this model's line of before
        return f"{saved} -> {identity.legacy}"
    labels = dict.fromkeys([*old, *new])
    return SEP.join(f"{label} {old.get(label, 'none')} -> {new.get(label, 'none')}" for label in labels
                    if old.get(label) != new.get(label))


def _tensor_changes(saved: dict, here: dict) -> str:
    """The tensors whose shapes differ (or that one side lacks), checkpoint -> this model; "" if none."""
    def shape(tensors: dict, name: str) -> str:
        return _shape(getattr(tensors[name], "shape", ())) if name in tensors else "none"

    names = [n for n in dict.fromkeys([*here, *saved]) if shape(saved, n) != shape(here, n)]
    if not names:
        return ""
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return "tensors " + ", ".join(f"{n} {shape(saved, n)} -> {shape(here, n)}" for n in names[:SHOWN]) + more


def check_identity(identity: Identity, saved: str | None, path: str) -> None:
    """CheckpointError (one line, what changed) when a checkpoint's model identity is not this
    model's (`Identity.fits`): the launcher's check of a resume, before a model is built."""
    check_fit(identity, saved, path)


def check_fit(identity: Identity, saved: str | None, path: str, saved_tensors: dict | None = None,
              tensors: dict | None = None) -> None:
    """CheckpointError (one line) unless a checkpoint fits this model: its identity (`saved`) and,
    given both state dicts, every tensor's shape. The line says what changed, checkpoint -> this
    run: the encoder, observation keys or actions, then the tensors."""
    changes = "" if identity.fits(saved) else _changes(saved, identity)
    shapes = _tensor_changes(saved_tensors, tensors) if saved_tensors is not None and tensors is not None else ""
    if changes:
        raise CheckpointError(f"checkpoint {path} holds another model (checkpoint -> this run): {changes}"
                              + (f"{SEP}{shapes}" if shapes else ""))
    if shapes:
        raise CheckpointError(f"checkpoint {path} does not fit this model/config (checkpoint -> this run): {shapes}")
