"""A population member's mutable hyper-parameters (`Hyper`: PBT changes them, checkpoints keep them)
and the reward-shaping terms they weigh (`shaping_terms`)."""
from __future__ import annotations

from dataclasses import dataclass


def shaping_terms(env_cfg) -> tuple[list[str], list[float]]:
    """The reward-shaping terms a VizDoom env reports in info["terms"] (env.shaping's, then
    env.pickups', in their order) and their configured weights: every member's starting weights."""
    names = [f"shaping.{k}" for k in env_cfg.shaping] + [f"pickups.{k}" for k in env_cfg.pickups]
    return names, [float(w) for w in env_cfg.shaping.values()] + [float(w) for w in env_cfg.pickups.values()]


@dataclass
class Hyper:
    """One member's mutable hyper-parameters (PBT changes them; checkpoints keep them)."""

    lr: float
    entropy_coeff: float
    shaping: list[float]  # weights of shaping_terms(env)

    def as_dict(self) -> dict:
        return {"lr": self.lr, "entropy_coeff": self.entropy_coeff, "shaping": list(self.shaping)}
