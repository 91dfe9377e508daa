"""The population's learners on one node (`Members`): their models, learners, hyper-parameters,
per-member statistics, PBT, and what a checkpoint keeps of them.

population.size=1 is the plain run: one learner, whose checkpoint format is the single-policy
one. With P > 1 each member has its own learner (its own copy of algo.*, its optimizer, its
all-reduce group: Peers.add_members) and its own initial parameters (seeds.MODEL_INIT, member).
Self-play snapshots (population.snapshots) are frozen models beside the learners: the policy
workers serve them as members P, P+1, ... and nobody trains them.
"""
from __future__ import annotations

import copy
import logging

import torch

from nodes import seeds
from nodes.errors import CheckpointError, one_line
from nodes.learning.learner import Learner
from nodes.models.actor_critic import ActorCritic
from nodes.population.hypers import Hyper, shaping_terms
from nodes.population.member_stats import MemberRow, MemberStats, merge_members
from nodes.population.pbt import Pbt

log = logging.getLogger("nodes")


class Members:
    def __init__(self, cfg, spec, peers, device: torch.device):
        self.cfg = cfg
        self.size = cfg.population.size
        self.learners: list[Learner] = []
        for p in range(self.size):
            torch.manual_seed(seeds.derive(cfg.seed, seeds.MODEL_INIT, *([p] if p else [])))
            model = ActorCritic(spec, cfg.model).to(device)
            self.learners.append(Learner(model, copy.deepcopy(cfg.algo), peers, cfg.train.precision, member=p))
        names, weights = shaping_terms(cfg.env) if cfg.env.family == "doom" else ([], [])
        self.hypers = [Hyper(cfg.algo.lr, cfg.algo.entropy_coeff, list(weights)) for _ in range(self.size)]
        # self-play snapshots: frozen copies, taken every snapshot_every_frames frames per member
        self.snapshots = [ActorCritic(spec, cfg.model).to(device) for _ in range(cfg.population.snapshots)]
        self.snapshots_taken = 0
        self.snapshot_at = cfg.population.snapshot_every_frames
        self.opponents = self.size + len(self.snapshots)  # who can sit in another seat
        self.tracked = self.size > 1 or bool(self.snapshots)  # per-member figures are gathered and reported
        self.stats = [MemberStats(self.opponents) for _ in range(self.size)]
        self.pbt = Pbt(cfg.pbt, self.size, cfg.seed, names)
        # the rollout workers weigh the env's shaping terms by each member's weights only when PBT may
        # change them; else the env's own training reward is every member's
        self.weighs_terms = self.pbt.enabled and bool(names) and "shaping" in cfg.pbt.mutate
        self.merged: list[dict] = []  # every member's figures over all ranks at the last gather

    @property
    def models(self) -> list[torch.nn.Module]:
        """What the policy workers serve: the learners' models, then the snapshots."""
        return [m.model for m in self.learners] + self.snapshots

    def shaping_table(self) -> torch.Tensor | None:
        """[P, K] shaping weights for the rollout workers (Control.shaping), or None."""
        return torch.tensor([h.shaping for h in self.hypers]) if self.weighs_terms else None

    def on_episode(self, reward: float, length: int, objective: float, match: dict | None = None,
                   member: int = 0, opponents=()) -> None:
        if member < self.size:  # a snapshot's seat: nobody's statistics
            self.stats[member].add(reward, objective, match, opponents)

    # ------------------------------------------------------------------ stats over ranks
    def rows(self) -> list[float]:
        """This rank's member rows, flattened (appended to its RankRow for the stats gather)."""
        return [x for s in self.stats for x in s.row()]

    def merge(self, tails: list[list[float]]) -> None:
        """Every rank's `rows()` (in rank order) into `merged`."""
        w = MemberRow.width(self.opponents)
        self.merged = merge_members([[t[p * w : (p + 1) * w] for p in range(self.size)] for t in tails], self.size,
                                    self.opponents)

    def objectives(self) -> list[float | None]:
        if self.cfg.pbt.objective == "win":
            return [m["match"]["win"] if "match" in m else None for m in self.merged]
        return [m[self.cfg.pbt.objective] for m in self.merged]  # reward or true_objective

    def after_gather(self, tails: list[list[float]], frames: int) -> tuple[list[dict], bool]:
        """Every rank's member rows merged, then a self-play snapshot and a PBT step where due (the
        same decisions on every rank); returns (the PBT replacements, whether any member's or
        snapshot's weights changed: the policy workers must get them)."""
        self.merge(tails)
        snapshot = self.snapshot_step(frames)
        events = self.pbt_step(frames)
        return events, snapshot is not None or bool(events)

    # ------------------------------------------------------------------ PBT
    def pbt_step(self, frames: int) -> list[dict]:
        """After a stats gather: a PBT step when one is due; applies its replacements (the same on
        every rank) and returns them (the caller publishes the replaced members' weights)."""
        per_member = frames / self.size
        if not self.merged or not self.pbt.due(per_member):
            return []
        steps = self.pbt.steps
        events = self.pbt.decide(self.objectives(), self.hypers, per_member)
        if self.pbt.steps > steps and not events:  # a step was taken: no member far enough behind
            shown = " / ".join(f"{o:.3f}" for o in self.objectives())
            log.info("pbt step %d at %s frames per member: no member replaced (objectives %s)", self.pbt.steps,
                     f"{int(per_member):,}", shown)
        for e in events:
            self.replace(e["member"], e["source"], Hyper(**e["new"]))
            log.info("%s", self.pbt.describe(e))
        return events

    def replace(self, p: int, q: int, hyper: Hyper) -> None:
        """Member p takes member q's parameters, observation and return statistics and optimizer
        state (copies: the two go on apart), then `hyper`. Its version moves on by one, so the
        policy workers load the new weights; its recent episodes (the old policy's) are forgotten."""
        target, source = self.learners[p], self.learners[q]
        version = target.version
        state = copy.deepcopy(source.state_dict())
        target.load_state_dict(state)
        target.version = version + 1
        target.set_hyper(hyper.lr, hyper.entropy_coeff)
        self.hypers[p] = hyper
        self.stats[p] = MemberStats(self.opponents)

    def snapshot_step(self, frames: int) -> int | None:
        """Self-play: when due, the next member in turn is copied into the oldest snapshot slot;
        returns that slot (the caller publishes it and the count), else None. At the same
        iteration on every rank (after a stats gather)."""
        if not self.snapshots or frames / self.size < self.snapshot_at:
            return None
        every = self.cfg.population.snapshot_every_frames
        self.snapshot_at = (int(frames / self.size) // every + 1) * every
        slot, source = self.snapshots_taken % len(self.snapshots), self.snapshots_taken % self.size
        self.snapshots[slot].load_state_dict(self.learners[source].model.state_dict())
        self.snapshots_taken += 1
        log.info("self-play snapshot %d: member %d at version %d frozen as snapshot%d (an opponent from now on)",
                 self.snapshots_taken, source, self.learners[source].version, slot)
        return slot

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The checkpoint's learner part. One policy: its learner's state (the single-policy format).
        A population: each member's learner state and hyper-parameters, the PBT state; named by
        the members' versions summed (it grows with every update of any member). Either with the
        self-play snapshots taken so far."""
        if self.size == 1:
            state = self.learners[0].state_dict()
        else:
            members = [dict(m.state_dict(), hyper=h.as_dict()) for m, h in zip(self.learners, self.hypers)]
            state = {"population": members, "pbt": self.pbt.state_dict(),
                     "policy_version": sum(m.version for m in self.learners)}
        if self.snapshots:
            state.update(snapshots=[m.state_dict() for m in self.snapshots], snapshots_taken=self.snapshots_taken,
                         snapshot_at=self.snapshot_at)
        return state

    def _load_snapshots(self, state: dict, path: str) -> None:
        saved = state.get("snapshots", [])
        if not self.snapshots or not saved:  # none kept, or none wanted: they start afresh
            return
        if len(saved) != len(self.snapshots):
            raise CheckpointError(f"checkpoint {path} holds {len(saved)} self-play snapshots; this run has "
                                  f"population.snapshots={len(self.snapshots)}")
        for model, s in zip(self.snapshots, saved):
            model.load_state_dict(s)
        self.snapshots_taken, self.snapshot_at = int(state["snapshots_taken"]), int(state["snapshot_at"])

    def load_state_dict(self, state: dict, path: str) -> None:
        saved = state.get("population")
        if self.size == 1:
            if saved is not None:
                raise CheckpointError(f"checkpoint {path} holds a population of {len(saved)}; this run has "
                                      "population.size=1")
            self._load(0, state, path)
            self._load_snapshots(state, path)
            return
        if saved is None or len(saved) != self.size:
            have = "one policy" if saved is None else f"a population of {len(saved)}"
            raise CheckpointError(f"checkpoint {path} holds {have}; this run has population.size={self.size}")
        for p, member in enumerate(saved):
            self._load(p, member, path)
            self.hypers[p] = Hyper(**member["hyper"])
            self.learners[p].set_hyper(self.hypers[p].lr, self.hypers[p].entropy_coeff)
        self.pbt.load_state_dict(state["pbt"])
        self._load_snapshots(state, path)

    def _load(self, p: int, state: dict, path: str) -> None:
        try:
            self.learners[p].load_state_dict(state, path)
        except CheckpointError:  # another model (its identity): the line names both
            raise
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit this model/config: {one_line(exc)}") from None

    def summary(self, checksums: list[list[str]] | None) -> list[dict]:
        """Each member: version, hyper-parameters, figures over all ranks, parameter checksums."""
        out = []
        for p, (m, h) in enumerate(zip(self.learners, self.hypers)):
            row = {"member": p, "policy_version": m.version, **h.as_dict()}
            row.update(self.merged[p] if p < len(self.merged) else {})
            if checksums is not None:
                row["param_checksums"] = checksums[p]
            out.append(row)
        return out
