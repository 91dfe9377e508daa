"""Learner -> policy workers hand-off of the policy (parameters and buffers) via a seqlock.

One flat tensor holds parameters and buffers (observation statistics) in a fixed order. It lives
on the policy workers' device: CPU shared memory, or on a GPU a CUDA tensor the policy workers
open by IPC handle (torch.multiprocessing shares CUDA tensors that way), so weights never leave
the GPU. The learner makes the sequence number odd, copies the parameters in, waits for that
copy to finish (a CUDA copy is asynchronous), stores the version and makes the sequence even. A
reader copies only when the version changed and keeps its copy only if the sequence number was
even and unchanged across its read, so it never loads half-written weights and never blocks the
learner for longer than a counter update.

Ordering: the sequence number and version are read and written under a process-shared lock
(a POSIX semaphore). POSIX makes sem_wait/sem_post full memory barriers, so the data copy cannot
be observed out of order with the counters on any CPU, weakly ordered ones (ARM servers such as
Grace) included; the lock is held for the counter update only, never during a copy.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing as mp
import os

import torch
from torch import nn

from nodes import janitor

LOCK_TIMEOUT_S = 10.0


def policy_tensors(model: nn.Module):
    """Everything that defines the behaviour policy: parameters, then buffers, in a fixed order."""
    return list(model.parameters()) + list(model.buffers())


def _wait_for_copies(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


@functools.cache
def remove_cuda_ipc_file_at_exit() -> None:
    """The CUDA driver's /dev/shm file for this process (janitor.cuda_ipc_files), which it leaves
    behind even at a clean exit, goes when this process exits normally (the janitor removes it if
    this process is killed). Once per process; not in a forked child, which has its own pid."""
    pid = os.getpid()
    atexit.register(lambda: os.getpid() == pid and janitor.remove(janitor.cuda_ipc_files(pid)))


class SharedWeights:
    def __init__(self, model: nn.Module, device: str | torch.device = "cpu"):
        n = sum(p.numel() for p in policy_tensors(model))
        self.device = torch.device(device)
        self.flat = torch.zeros(n, device=self.device)
        if self.device.type == "cpu":
            self.flat.share_memory_()
        elif self.device.type == "cuda":
            remove_cuda_ipc_file_at_exit()
        self.meta = torch.zeros(2, dtype=torch.int64).share_memory_()  # [seq, version]
        self.lock = mp.get_context("spawn").Lock()

    def release(self) -> None:
        """Drops this process's mapping of the weights, at a policy worker's end. A CUDA tensor
        received from another process holds the sender's count of its users until it is freed, and
        a worker ends by os._exit (its arguments are never freed): without this the count never
        drops, and torch's CudaIPCTypes warns at the learner process's exit that it was 'terminated
        before all shared CUDA tensors released' (in a destructor that a launch's processes skip:
        they end by os._exit too, launch.process.exits.exit_now)."""
        self.flat = None

    def counters(self) -> tuple[int, int]:
        """(sequence number, version), read with the barrier the seqlock needs."""
        with self.lock:
            return int(self.meta[0]), int(self.meta[1])

    @contextlib.contextmanager
    def _writing(self):
        # a reader holds the lock for microseconds; one that died holding it must not hang the learner
        if not self.lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise RuntimeError(f"the weights lock was held for {LOCK_TIMEOUT_S:.0f} s: a policy worker died holding it")
        try:
            yield
        finally:
            self.lock.release()

    def publish(self, model: nn.Module, version: int) -> None:
        with self._writing():
            self.meta[0] += 1
        with torch.no_grad():
            tensors = [p.detach().reshape(-1).float() for p in policy_tensors(model)]
            if all(t.device == self.device for t in tensors):
                torch.cat(tensors, out=self.flat)
            else:
                self.flat.copy_(torch.cat(tensors))
        _wait_for_copies(self.device)
        with self._writing():
            self.meta[1] = version
            self.meta[0] += 1

    @property
    def version(self) -> int:
        return self.counters()[1]


class WeightsReader:
    """Policy-worker side: loads newer weights into a local model (on the same device as the
    shared flat tensor) when there are any."""

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
        if int(self.shared.meta[1]) == self.version:  # a racy hint only: the check below decides
            return False
        seq, version = self.shared.counters()
        if seq % 2 or version == self.version:
            return False  # being written (try at the next batch), or nothing new after all
        self._buf.copy_(self.shared.flat)
        _wait_for_copies(self.shared.device)
        if self.shared.counters()[0] != seq:
            return False
        with torch.no_grad():
            for p, v in self._views:
                p.copy_(v.to(p.dtype))
        self.version = version
        return True
