"""Population-based training: when, who replaces whom, and what mutates (`Pbt`).

Every pbt.period_frames env frames per member (the run's frames / population.size, as Sample
Factory counts them), at the first stats gather after the mark, the members are ranked by their
objective over every node (the mean recent episode reward, or the recent match win rate); each
member of the bottom replace_frac (at least one) copies a random member of the top replace_frac,
weights, optimizer state and hyper-parameters, if that member is better by the required gap,
then mutates its hyper-parameters (each multiplied or divided by pbt.perturb with probability
pbt.mutation_rate, at least one of them, so the copy explores).

Every rank takes the same decision without a collective of its own: the objectives come from the
gathered stats rows, which every rank holds bit for bit the same, and every draw comes from a
stream named by the PBT step (nodes.seeds.PBT). Rank 0 writes the events; the parameter
checksums (per member, every sync.check_every iterations) would catch a rank that differed.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from nodes import seeds
from nodes.population.hypers import Hyper


class Pbt:
    def __init__(self, cfg, size: int, seed: int, shaping_names: list[str]):
        self.cfg, self.size, self.seed, self.shaping_names = cfg, size, seed, shaping_names
        self.enabled = size > 1 and cfg.period_frames > 0
        self.steps = 0  # PBT steps taken (decisions made, replacements or not)
        # the first step: the first multiple of the period, at or after start_frames
        self.next_at = max(1, math.ceil(cfg.start_frames / cfg.period_frames)) * cfg.period_frames if self.enabled \
            else math.inf
        self.events: list[dict] = []  # every replacement so far (kept in checkpoints)

    def _mark_after(self, frames: float) -> int:
        """The first multiple of period_frames past `frames`."""
        return int(frames // self.cfg.period_frames + 1) * self.cfg.period_frames

    def due(self, frames_per_member: float) -> bool:
        return frames_per_member >= self.next_at

    def decide(self, objectives: list[float | None], hypers: list[Hyper], frames_per_member: float) -> list[dict]:
        """This step's replacements: [{"step", "frames", "member", "source", "objective",
        "source_objective", "old", "source_hyper", "new"}] (old: the member's hyper-parameters
        before, source_hyper: those it copied, new: after the mutation); none while a member has
        no objective yet (the step waits for the next gather)."""
        if any(o is None or math.isnan(o) for o in objectives):
            return []
        c = self.cfg
        rng = np.random.default_rng(seeds.derive(self.seed, seeds.PBT, self.steps))
        self.steps += 1
        self.next_at = self._mark_after(frames_per_member)
        order = sorted(range(self.size), key=lambda p: (objectives[p], p))
        k = max(1, round(self.size * c.replace_frac))
        bottom, top = order[:k], order[-k:]
        events = []
        for p in bottom:
            q = top[int(rng.integers(len(top)))]
            gap = objectives[q] - objectives[p]
            if q == p or gap <= c.replace_gap * abs(objectives[q]) or gap <= c.replace_gap_abs:
                continue
            new = self.mutate(copy.deepcopy(hypers[q]), rng)
            events.append(dict(step=self.steps, frames=int(frames_per_member), member=p, source=q,
                               objective=objectives[p], source_objective=objectives[q],
                               old=hypers[p].as_dict(), source_hyper=hypers[q].as_dict(), new=new.as_dict()))
        self.events += events
        return events

    def mutate(self, hyper: Hyper, rng: np.random.Generator) -> Hyper:
        """Each mutable value multiplied or divided by pbt.perturb with probability mutation_rate,
        at least one of them."""
        keys = [(name, None) for name in ("lr", "entropy_coeff") if name in self.cfg.mutate]
        if "shaping" in self.cfg.mutate:
            keys += [("shaping", i) for i in range(len(hyper.shaping))]
        if not keys:
            return hyper
        chosen = [key for key in keys if rng.random() < self.cfg.mutation_rate]
        if not chosen:
            chosen = [keys[int(rng.integers(len(keys)))]]
        for name, i in chosen:
            factor = self.cfg.perturb if rng.random() < 0.5 else 1.0 / self.cfg.perturb
            if i is None:
                setattr(hyper, name, getattr(hyper, name) * factor)
            else:
                hyper.shaping[i] *= factor
        return hyper

    def describe(self, event: dict) -> str:
        """One log line for a replacement: who replaced whom, the objectives, and each mutated value
        (the source's -> the member's new one)."""
        old, new = event["source_hyper"], event["new"]
        changes = [f"{k} {old[k]:.3g} -> {new[k]:.3g}" for k in ("lr", "entropy_coeff") if old[k] != new[k]]
        changes += [f"{name} {a:.3g} -> {b:.3g}" for name, a, b in zip(self.shaping_names, old["shaping"],
                                                                       new["shaping"]) if a != b]
        return (f"pbt step {event['step']} at {event['frames']:,} frames per member: member {event['member']} "
                f"(objective {event['objective']:.3f}) takes member {event['source']}'s weights "
                f"(objective {event['source_objective']:.3f}), mutated: " + ", ".join(changes))

    def state_dict(self) -> dict:
        return {"steps": self.steps, "next_at": self.next_at if self.enabled else -1, "events": list(self.events)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.events = int(state["steps"]), list(state["events"])
        if self.enabled and state["next_at"] >= 0:
            self.next_at = int(state["next_at"])
