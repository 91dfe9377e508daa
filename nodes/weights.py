"""Learner -> policy workers hand-off of the policy (parameters and buffers) via a seqlock.

The flat shared tensor holds parameters and buffers (observation statistics) in a fixed order.
The learner bumps `meta[0]` to odd, copies the parameters, stores the version, bumps it to even.
A reader copies only when the version changed and keeps the copy only if the sequence number was
even and unchanged across its read, so it never loads half-written weights and never blocks the
learner.
"""
from __future__ import annotations

import torch
from torch import nn


def policy_tensors(model: nn.Module):
    """Everything that defines the behaviour policy: parameters, then buffers, in a fixed order."""
    return list(model.parameters()) + list(model.buffers())


class SharedWeights:
    def __init__(self, model: nn.Module):
        n = sum(p.numel() for p in policy_tensors(model))
        self.flat = torch.zeros(n).share_memory_()
        self.meta = torch.zeros(2, dtype=torch.int64).share_memory_()  # [seq, version]

    def publish(self, model: nn.Module, version: int) -> None:
        self.meta[0] += 1
        with torch.no_grad():
            self.flat.copy_(torch.cat([p.detach().reshape(-1).float() for p in policy_tensors(model)]))
        self.meta[1] = version
        self.meta[0] += 1

    @property
    def version(self) -> int:
        return int(self.meta[1])


class WeightsReader:
    """Policy-worker side: loads newer weights into a local model when there are any."""

    def __init__(self, shared: SharedWeights, model: nn.Module):
        self.shared, self.model = shared, model
        self.version = -1
        self._buf = torch.empty_like(shared.flat)
        # views into the staging buffer, one per parameter, so an accepted read is one copy each
        self._views, offset = [], 0
        for p in policy_tensors(model):
            self._views.append((p, self._buf[offset : offset + p.numel()].view_as(p)))
            offset += p.numel()

    def maybe_update(self) -> bool:
        meta = self.shared.meta
        if int(meta[1]) == self.version:
            return False
        seq = int(meta[0])
        if seq % 2:
            return False  # being written; try at the next batch
        version = int(meta[1])
        self._buf.copy_(self.shared.flat)
        if int(meta[0]) != seq:
            return False
        with torch.no_grad():
            for p, v in self._views:
                p.copy_(v.to(p.dtype))
        self.version = version
        return True
