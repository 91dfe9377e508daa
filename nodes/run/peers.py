"""What a node needs from the other nodes (`Peers`), and the one-node answer (`Solo`).

The learner and the node loop call these methods at fixed points of every iteration, in the
same order on every rank, so an implementation can use collective operations (sync.dist_peers.DistPeers
does). Every implementation subclasses `Peers`, so a method added here and forgotten in one of
them is an error when it is created, not the single-node behaviour silently running on many
nodes; tests/test_peers_contract.py runs one contract suite against both. With one node every
method is the identity or a constant: the single-node fallback creates no process group at all.
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod

import torch
from torch import nn

from nodes.models.numerics import param_checksum

# A rank's stop vote as it rides in reduce_gradients: 0 none, the number of the signal that asked
# this rank to stop, or NO_SIGNAL (its own time limit, train.max_seconds).
NO_SIGNAL = -1


def vote_flags(vote: int) -> tuple[float, ...]:
    """A vote as four flags that are summed over ranks: voted, voted on a signal, the signal's
    number and its square (together they tell whether every signalled rank got the same one)."""
    signum = float(max(vote, 0))
    return float(vote != 0), float(vote > 0), signum, signum * signum


def world_vote(voted: float, on_signal: float, signums: float, squares: float) -> int:
    """The summed flags as the world's vote: 0 when nobody voted; the signal when every rank that
    voted on one got the same (so a rank whose own signal has not come yet, Slurm's signal reaching
    the tasks of a step some ms apart, stops as the others did: by that signal); else NO_SIGNAL."""
    if voted < 0.5:
        return 0
    n, total = round(on_signal), round(signums)
    if n and n * round(squares) == total * total:  # n·Σs² >= (Σs)², equal iff every s is the same
        return total // n
    return NO_SIGNAL


def agreement_digest(model: nn.Module, extra: bytes = b"", params: str | None = None) -> str:
    """What `check_agreement` compares across ranks: with no `extra`, exactly param_checksum(model)
    (the summary reports it); else sha256 over that digest's 32 bytes followed by `extra` (the run's
    other mutable state), so ranks with equal parameters but different counters differ.
    `params`: param_checksum(model), when the caller has it already."""
    params = param_checksum(model) if params is None else params
    if not extra:
        return params
    return hashlib.sha256(bytes.fromhex(params) + extra).hexdigest()


class Peers(ABC):
    rank: int
    world_size: int
    elastic = False  # sync.elastic: the world may change (connect, regroup, share below)
    # the parameter digest every rank last agreed on (check_agreement): what the summary reports
    # after a failure, when a collective cannot run and a GPU may not be touched again
    last_checksum: str | None = None

    @property
    def is_writer(self) -> bool:
        """Only one node writes logs, TensorBoard, checkpoints and the summary: rank 0."""
        return self.rank == 0

    def connect(self) -> dict | None:
        """Elastic: enter the run's world; returns the change as `regroup` does (a fixed world is
        connected when made: None)."""
        return None

    def changes_pending(self) -> bool:
        """Elastic: the world changes after this iteration (a node waits to join); the same answer
        on every rank (it rode in the iteration's gradient all-reduce)."""
        return False

    def regroup(self, lost: list[int] = ()) -> dict:
        """Elastic: form the next world, without the `lost` ranks, with the nodes waiting to join;
        returns the change ({generation, nodes, world_size, left, joined})."""
        raise NotImplementedError("a fixed world cannot change")

    def mark_over(self, outcome: str) -> None:
        """Elastic: the run ended for good; nodes that come to join later are told so."""
        return None

    @abstractmethod
    def add_members(self, members: int) -> None:
        """A population: one gradient all-reduce group per member (member 0's is the world's),
        made on every rank, in the same order, before `start`."""

    @abstractmethod
    def reduce_gradients(self, model: nn.Module, num_samples: int, vote: int = 0,
                         sums: torch.Tensor | None = None, member: int = 0) -> tuple[int, int]:
        """Replace local gradients by the sample-weighted mean over ranks; return (the total
        samples, the world's stop vote: `world_vote` of every rank's `vote`, 0 when none voted).
        The vote rides in the gradient's collective, so every rank stops after the same iteration
        without a collective of its own; so does `sums` (a float32 vector on the gradients' device,
        the running norms' moments), summed over ranks in place, unweighted. `member`: whose
        gradients (its own group: add_members)."""

    @abstractmethod
    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks, in place; returns the tensor. A collective of its own: the learner's
        per-iteration sums ride in reduce_gradients instead (launch.scaling times the ring with it)."""

    @abstractmethod
    def gather_stats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats, indexed by rank (same length on every rank). Called every
        sync.stats_every iterations and after the last one, not every iteration: an all-gather
        costs the ring's latency once per rank, which at hundreds of nodes outweighs a GPU step."""

    @abstractmethod
    def share(self, progress: int, state) -> bytes | None:
        """Every rank takes the state (bytes from `state()`) of the rank with the highest `progress`, the
        lowest rank among equals: with equal progress everywhere (a fixed world at its start passes 0)
        that is rank 0's. Returns those bytes, None on the source. `state()` is called on the source
        alone, and only when another rank needs its bytes (one rank: never).
        A collective: every rank calls it, in the same order (elastic: after each change of world)."""

    @abstractmethod
    def check_agreement(self, model: nn.Module, version: int, extra: bytes = b"") -> list[str]:
        """Every rank's `agreement_digest(model, extra)`, by rank; raises if they differ (called every
        few steps): "parameters diverged ..." when the parameters differ, "run state diverged ..." when
        only `extra` does (the caller's counters and normalisers). `last_checksum` becomes the
        parameters' digest (param_checksum), whatever `extra`."""

    @abstractmethod
    def mark_ready(self, version: int) -> None:
        """This rank has a full batch for `version`."""

    @abstractmethod
    def others_ready(self, version: int) -> bool:
        """Enough ranks have a full batch for `version` that a straggler should stop waiting."""

    @abstractmethod
    def close(self, clean: bool = True) -> None:
        """Leave; `clean`: every rank stopped after the same iteration (not after a failure)."""


class Solo(Peers):
    """One node: nobody to wait for, nothing to exchange."""

    rank = 0
    world_size = 1

    def add_members(self, members: int) -> None:
        pass

    def reduce_gradients(self, model: nn.Module, num_samples: int, vote: int = 0,
                         sums: torch.Tensor | None = None, member: int = 0) -> tuple[int, int]:
        return num_samples, vote

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def gather_stats(self, values: list[float]) -> list[list[float]]:
        return [list(values)]

    def share(self, progress: int, state) -> bytes | None:
        return None  # the only rank is the source: its state is everyone's (state() is never called)

    def check_agreement(self, model: nn.Module, version: int, extra: bytes = b"") -> list[str]:
        params = param_checksum(model)
        self.last_checksum = params
        return [agreement_digest(model, extra, params)]

    def mark_ready(self, version: int) -> None:
        pass

    def others_ready(self, version: int) -> bool:
        return False  # no other rank is waiting for this one

    def close(self, clean: bool = True) -> None:
        pass
