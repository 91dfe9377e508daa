"""What a node needs from the other nodes, as an interface; `Solo` is the one-node answer.

The learner and the node loop call these methods at fixed points of every iteration, in the
same order on every rank, so an implementation can use collective operations (sync/ does).
With one node every method is the identity or a constant: the single-node fallback creates
no process group at all.
"""
from __future__ import annotations

from typing import List

import torch
from torch import nn

from nodes.models import param_checksum


class Solo:
    rank = 0
    world_size = 1

    @property
    def is_writer(self) -> bool:
        """Only one node writes logs, TensorBoard, checkpoints and the summary."""
        return self.rank == 0

    def start(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Make every rank start from rank 0's parameters, buffers and optimizer state."""

    def reduce_gradients(self, model: nn.Module, num_samples: int) -> int:
        """Replace local gradients by the sample-weighted mean over ranks; return total samples."""
        return num_samples

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks (observation statistics)."""
        return tensor

    def gather_stats(self, values: List[float]) -> List[List[float]]:
        """Every rank's list of floats, indexed by rank (same length on every rank)."""
        return [values]

    def check_agreement(self, model: nn.Module, version: int) -> List[str]:
        """Parameter checksums of every rank; raises if they differ (called every few steps)."""
        return [param_checksum(model)]

    def mark_ready(self, version: int) -> None:
        """This rank has a full batch for `version`."""

    def others_ready(self, version: int) -> bool:
        """Enough other ranks have a full batch for `version` that a straggler should stop waiting."""
        return False

    def close(self, clean: bool = True) -> None:
        """Leave; `clean`: every rank stopped after the same iteration (not after a failure)."""
