"""DistPeers: the multi-node answer to nodes.run.peers, over torch.distributed.

- Process group: on a GPU with NCCL, one group with two backends, "cpu:gloo,cuda:nccl": gradients
  (with the observation moments; tensors on the model's device) go over NCCL; stats rows, checksums
  and the run state shared at the start (bytes) go as CPU tensors over gloo (a tiny NCCL
  collective costs a kernel launch and a host sync to read). `device_id` makes NCCL connect at
  init, so a set-up error is reported as such, not later as a lost peer. On CPU (or with
  sync.backend=gloo and CUDA tensors) plain gloo. Rendezvous through a TCPStore on rank 0 (the
  World's master address and port); collectives bounded by sync.timeout_s, NCCL's own limit by
  sync.timeout_s + 60 s (a backstop: our watch below fires first).
- Start: `share` gives every rank the run state (nodes.run.run_state) of rank 0 (a fixed world) or of the
  rank that went furthest (elastic): its length, then its bytes as a uint8 tensor, over the small (CPU) device.
- Every iteration: one flat all-reduce (sync.flat_grads) of every trainable parameter's gradient
  weighted by each node's sample count, the sample count, the stop votes and the running norms'
  moments. Every sync.stats_every iterations and after the last: a small stats row gathered.
- Every sync.check_every iterations: a sha256 of the parameters (and one of it with the run's
  other state, when the caller gives it) all-gathered; any difference is a hard error naming the
  ranks. The last agreed parameter digest is kept (`last_checksum`) for the summary after a
  failure, when the device may no longer be touched.
- Stragglers: a rank with a full batch adds itself to the store counter `ready/<version>`; a rank
  still collecting polls that counter and, once sync.ready_frac of the ranks are ready, trains on
  the samples it has (at least sync.min_batch_frac of a batch; in sampler.mode=sync its
  rollouts end early instead, DD-PPO's preemption: nodes.sampling.batcher). The all-reduce weights every
  rank by its sample count, so the update is the mean over all samples actually collected.
- Faults: each rank writes a counter to `hb/<rank>` in the store every second from a thread. When a
  collective fails (a peer's socket closed, or the timeout), the ranks whose heartbeat stopped
  changing (sync.liveness: one rule, on this host's clock) are named in the error; if the store
  itself is gone, rank 0 (its host) is the lost one.
  Every collective is started asynchronously and waited for here: an NCCL collective
  returns once queued and a dead peer makes it hang, not fail, so the wait polls the work and,
  about once a second, the heartbeats; a rank whose heartbeat stopped changing, or
  sync.timeout_s without an answer, ends it with PeerLost. gloo still fails at once when a
  peer's socket closes. After any failure an NCCL group is aborted, not destroyed: its kernels
  waiting for the lost peer never end, and anything queued behind them on the device would hang.
  A watchdog (sync.watchdog) backs this up: a call to a frozen peer or store that never returns
  ends the process after sync.timeout_s + 10 s, naming the lost rank.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from nodes.errors import PeerLost, one_line
from nodes.models.numerics import param_checksum
from nodes.run.peers import Peers, agreement_digest, vote_flags, world_vote
from sync.flat_grads import pack, unpack
from sync.listen import choose_gloo_interface, serving_store
from sync.liveness import HEARTBEAT_S, PREFIX, Heartbeat, Liveness
from sync.watchdog import Watchdog
from sync.world import World

LOST_WAIT_S = 6 * HEARTBEAT_S  # how long lost_ranks looks for a stale heartbeat (> STALE_BEATS periods)
NCCL_SLACK = timedelta(seconds=60)  # NCCL's own timeout is ours plus this: only a backstop
READY_POLL_S = 0.002  # a straggler's reads of the ready counter: the gap per 8 ranks of the world
READY_POLL_MAX_S = 0.02  # and the longest
CLOSE_JOIN_S = 15.0  # longest wait for a thread or a peer when leaving (a heartbeat set() times out at 10 s)
log = logging.getLogger("sync")
__all__ = ["DistPeers", "Diverged", "PeerLost"]  # PeerLost lives in nodes.errors (the node catches it)


class Diverged(RuntimeError):
    """Parameters differ between ranks."""


def group_backend(device: str, backend: str) -> str:
    """The init_process_group backend for a learner on `device` and sync.backend (auto|gloo|nccl)."""
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend != "nccl":
        return backend  # gloo takes CPU and CUDA tensors alike
    if not device.startswith("cuda"):
        raise ValueError(f"sync.backend=nccl needs a CUDA device, got train.device={device}")
    return "cpu:gloo,cuda:nccl"  # NCCL has no CPU tensors: the small ones take gloo


def collective_devices(device: str) -> tuple[torch.device, torch.device]:
    """(bulk, small): where gradients, moments and parameters travel (the model's device), and where
    stats rows, checksums and the start-up state's bytes do: the CPU, whatever the backend, since they are read
    on the host (on CUDA each would cost a copy and a sync) and gloo carries them."""
    return torch.device(device), torch.device("cpu")


class DistPeers(Peers):
    def __init__(self, world: World, sync_cfg, device: str = "cpu", rendezvous=None):
        """rendezvous (sync.rendezvous.Rendezvous): elastic membership; the world's rank is then
        this node's id, and its rank in each generation is its place among the members."""
        self.world, self.cfg = world, sync_cfg
        self.rendezvous = rendezvous
        self.elastic = rendezvous is not None
        self.node = world.rank  # elastic: the node's id for the whole run (its rank changes)
        self.backend = group_backend(device, sync_cfg.backend)
        self._nccl = "nccl" in self.backend
        self.device = torch.device(device)
        if self._nccl and self.device.index is None:  # device_id needs an index
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.bulk_device, self.small_device = collective_devices(str(self.device))
        self.timeout = timedelta(seconds=sync_cfg.timeout_s)
        self.last_checksum: str | None = None  # the digest all ranks last agreed on
        self._failed = False
        self._members = 1
        self._join_seen = False  # elastic: this rank saw a node waiting to join
        self._pending = False  # elastic: some rank saw one (it rode in the last gradient all-reduce)
        self._in_flight = None  # the collective being waited for
        self._graveyard: list[tuple] = []  # elastic: groups left with a collective still waiting
        self._hb: Heartbeat | None = None
        if self._nccl:
            # our watch names a lost peer and aborts the group; NCCL's watchdog must not abort
            # the process first on the peer's error (torch's advice for _abort_process_group)
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
        self.generation = None
        if self.elastic:  # the world is found by connect(), once the node's workers run: no rank yet
            self.rank, self.world_size = -1, world.size
        else:
            # torchrun may host the store in its agent already (TORCHELASTIC_USE_AGENT_STORE): then
            # every rank, rank 0 included, is a client of it.
            host = world.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            self._connect(world.master_addr, world.master_port, world.rank, world.size, host)
        self._dog = Watchdog(sync_cfg.timeout_s + 10.0, lambda: self.rank, self.lost_ranks)

    def _connect(self, addr: str, port: int, rank: int, size: int, host: bool) -> None:
        """Join one world: its store, the process group, the heartbeat thread."""
        self.rank, self.world_size = rank, size
        choose_gloo_interface(addr)  # every backend here has gloo (NCCL's small tensors take it)
        self.store = (serving_store(addr, port, size, self.cfg.timeout_s) if host  # listens on addr only
                      else dist.TCPStore(addr, port, size, is_master=False, timeout=self.timeout))
        dist.init_process_group(self.backend, store=self.store, rank=rank, world_size=size,
                                timeout=self.timeout + NCCL_SLACK if self._nccl else self.timeout,
                                device_id=self.device if self._nccl else None)
        if self._nccl:  # the timeout above is NCCL's backstop; gloo's calls keep ours
            with contextlib.suppress(AttributeError, RuntimeError):  # a private API: else gloo keeps the backstop
                dist.group.WORLD._get_backend(torch.device("cpu")).set_timeout(self.timeout)
        self._failed = False
        self._ready_needed = max(1, math.ceil(self.cfg.ready_frac * size))
        self._last_poll, self._last_ready, self._last_version = 0.0, False, None
        self._poll_gap = min(READY_POLL_S * math.ceil(size / 8), READY_POLL_MAX_S)
        self.keys = dist.PrefixStore(PREFIX, self.store)  # our keys apart from the group's
        self._hb = Heartbeat(addr, port, rank, size, self._look_for_joins if self.elastic and rank == 0 else None)
        # this world's peers, on this host's clock; this thread's looks connected now (sync.liveness)
        self.liveness = Liveness(addr, port, rank, size).connect()
        self._groups = [None]  # each population member's gradient group (None: the world's)
        if self._members > 1:
            self.add_members(self._members)

    # ------------------------------------------------------------------ failures
    def _look_for_joins(self) -> None:
        """Elastic, rank 0, each heartbeat: a look for a node waiting to join (the rendezvous file).
        Rank 0 alone looks (its flag rides in the all-reduce to every rank): one shared-file read a
        second for the whole run, not one per node."""
        if not self._join_seen:
            self._join_seen = self.rendezvous.join_waiting(self.generation.number)

    def lost_ranks(self, wait_s: float = LOST_WAIT_S) -> list[int]:
        """Ranks whose heartbeat stopped, by sync.liveness's rule (polled until one is stale, at most
        wait_s: a rank that stopped beating is named within STALE_BEATS periods and a look); [0]
        when the store (rank 0's) is gone; [] when every peer still beats."""
        return self.liveness.lost(wait_s)

    def stale_ranks(self) -> list[int]:
        """Ranks whose heartbeat has not changed for STALE_BEATS periods, as seen by this rank's
        clock (one quick look, sync.liveness; hosts' clocks are never compared, so clock skew names no one)."""
        return self.liveness.stale()

    def _wait(self, work, what: str) -> None:
        """Wait for an async collective under our watch: poll it, look at the heartbeats about once
        a second, give up after sync.timeout_s. A failed gloo work is completed, and wait() raises."""
        start = time.monotonic()
        next_look = start + HEARTBEAT_S
        self._in_flight = work  # elastic: kept alive past a failure (see _leave_group)
        while not work.is_completed():
            now = time.monotonic()
            if now >= next_look:
                next_look = now + HEARTBEAT_S
                lost = self.stale_ranks()
                if lost:
                    raise PeerLost(f"rank {self.rank}: lost rank {', '.join(map(str, lost))} during {what} "
                                   f"(no heartbeat for {self.liveness.stale_s:.1f} s)", lost)
                if now - start > self.cfg.timeout_s:
                    raise PeerLost(f"rank {self.rank}: a peer stopped answering during {what} "
                                   f"(no answer for {self.cfg.timeout_s:g} s)")
            time.sleep(0 if now - start < 0.002 else 0.001)  # a tight spin first: most waits are short
        work.wait()

    def _fail(self) -> None:
        """A collective failed. NCCL kernels waiting for a lost peer never end, and every later use of
        the device (even the checksum's copy to the host) would queue behind them: abort now. gloo
        needs nothing: its calls raise, and close() destroys the group."""
        self._failed = True
        if self._nccl and dist.is_initialized():
            with contextlib.suppress(Exception):
                abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
                if abort is not None:
                    abort()
                else:  # an older torch
                    dist.group.WORLD._get_backend(self.device).abort()

    def _guard(self, what: str, fn, *args):
        try:
            with self._dog.watch(what):
                return fn(*args)
        except (RuntimeError, dist.DistBackendError, dist.DistStoreError) as exc:
            if isinstance(exc, Diverged):
                raise
            self._fail()
            if isinstance(exc, PeerLost):
                raise
            lost = self.lost_ranks()
            who = f"lost rank {', '.join(map(str, lost))}" if lost else "a peer failed"
            raise PeerLost(f"rank {self.rank}: {who} during {what} ({one_line(exc)[:200]})", lost) from None

    # ------------------------------------------------------------------ the interface
    def add_members(self, members: int) -> None:
        """Member p > 0 all-reduces in a group of its own (every rank: each node hosts the whole
        population), so a member's collectives never queue behind another's on one communicator
        (NCCL orders a communicator's operations) and members may reduce concurrently."""
        self._members = members  # elastic: made again in every new world

        def run():
            for _ in range(1, members):
                self._groups.append(dist.new_group(list(range(self.world_size)), timeout=self.timeout))
        self._guard("the population's groups", run)

    def reduce_gradients(self, model: nn.Module, num_samples: int, vote: int = 0,
                         sums: torch.Tensor | None = None, member: int = 0) -> tuple[int, int]:
        """The sample-weighted mean gradient of every trainable parameter into its .grad, the summed
        moments into `sums` (sync.flat_grads: one layout on every rank, gradients or not); returns
        the total sample count and the world's stop vote (nodes.run.peers.world_vote)."""
        params = [p for p in model.parameters() if p.requires_grad]
        flat, size = pack(params, num_samples, (*vote_flags(vote), float(self._join_seen)), sums)
        what = "the gradient all-reduce" + (f" of population member {member}" if member else "")
        reduce = functools.partial(dist.all_reduce, group=self._groups[member])
        if self.cfg.grad_dtype == "bf16":  # half the bytes; the counts and moments stay exact
            low = flat[:size].to(torch.bfloat16)
            self._collective(what, reduce, low)
            self._collective(what + " (its counts)", reduce, flat[size:])
            flat[:size].copy_(low)
        else:
            self._collective(what, reduce, flat)
        # only once it completed: on CUDA the host sync
        total, *votes, joins = unpack(params, flat, size, sums, n_flags=len(vote_flags(0)) + 1)
        self._pending = self._pending or joins > 0
        return int(round(total)), world_vote(*votes)

    def _collective(self, what: str, op, *args) -> None:
        """Run one collective started with async_op=True and wait for it under our watch (`_wait`):
        every collective, not only the gradient all-reduce, so a peer that froze (SIGSTOP: its
        socket stays open, gloo waits its whole timeout) is named by its heartbeat in seconds
        whichever collective the others were in."""
        self._guard(what, lambda: self._wait(op(*args, async_op=True), what))

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        self._collective("the statistics all-reduce", dist.all_reduce, tensor)
        return tensor

    def gather_stats(self, values: list[float]) -> list[list[float]]:
        mine = torch.tensor(values, dtype=torch.float64, device=self.small_device)
        rows = [torch.zeros_like(mine) for _ in range(self.world_size)]
        self._collective("the stats gather", dist.all_gather, rows, mine)
        return [row.tolist() for row in rows]

    def check_agreement(self, model: nn.Module, version: int, extra: bytes = b"") -> list[str]:
        """Both digests of every rank all-gathered in one call (64 bytes a rank): the parameters' and the
        one compared (nodes.run.peers.agreement_digest), so a difference is named for what it is."""
        params = param_checksum(model)
        digest = agreement_digest(model, extra, params)
        mine = torch.tensor(list(bytes.fromhex(params + digest)), dtype=torch.uint8, device=self.small_device)
        rows = [torch.zeros_like(mine) for _ in range(self.world_size)]
        self._collective("the parameter check", dist.all_gather, rows, mine)
        pairs = [bytes(row.tolist()).hex() for row in rows]
        param_sums, sums = [p[:64] for p in pairs], [p[64:] for p in pairs]
        at = f" at policy version {version}" if version >= 0 else ""
        for what, seen in (("parameters", param_sums), ("run state", sums)):
            differ = [r for r, s in enumerate(seen) if s != seen[0]]
            if differ:
                raise Diverged(f"{what} diverged{at}: ranks {differ} differ from rank 0")
        self.last_checksum = params
        return sums

    def mark_ready(self, version: int) -> None:
        self._guard("the ready count", self.keys.add, f"ready/{version}", 1)
        if self.rank == 0 and version >= 2:
            with contextlib.suppress(Exception):  # housekeeping only
                self.keys.delete_key(f"ready/{version - 2}")

    def others_ready(self, version: int) -> bool:
        """The ready counter of `version`, read at most every READY_POLL_S x ceil(world / 8)
        seconds (at most READY_POLL_MAX_S): the batcher asks at each of its polls
        (nodes.sampling.batcher), which at 64 waiting ranks was tens of thousands of store calls
        a second on one store; so the ranks of any world together
        read it about as often as 8 ranks do, and worlds of 8 or fewer as before. The answer kept
        between reads is for the version it was read for: a version not read yet is read at once (a
        straggler must not cut its batch on the previous iteration's "ready")."""
        now = time.monotonic()
        if version == self._last_version and now - self._last_poll < self._poll_gap:
            return self._last_ready
        count = self._guard("the ready count", self.keys.add, f"ready/{version}", 0)
        self._last_poll, self._last_version, self._last_ready = now, version, count >= self._ready_needed
        return self._last_ready

    # ------------------------------------------------------------------ elastic membership
    def connect(self) -> dict | None:
        """Elastic: enter the run's next generation (the first, or the one a running world forms
        for the nodes waiting to join); returns the change as regroup does. A fixed world
        connected when it was made: None."""
        if not self.elastic or self.generation is not None:
            return None
        gen = self.generation = self.rendezvous.join()
        self._connect(gen.store_addr, gen.store_port, gen.rank_of(self.node), len(gen.members), host=False)
        return self._change(self.rendezvous.members(gen.number - 1), gen)

    @staticmethod
    def _change(before, gen) -> dict:
        return dict(generation=gen.number, nodes=list(gen.members), world_size=len(gen.members),
                    left=sorted(set(before) - set(gen.members)), joined=sorted(set(gen.members) - set(before)))

    def changes_pending(self) -> bool:
        """A node waits to join, as some rank saw and the last gradient all-reduce told every rank."""
        return self._pending

    def regroup(self, lost: list[int] = ()) -> dict:
        """Leave this world and enter the next generation (sync.rendezvous): the survivors of a
        loss (`lost`: the ranks this one saw lost), or everyone with the nodes waiting to join.
        The old world's heartbeat goes on until the new one is formed, so a slower survivor still
        sees this rank alive. Returns the change (generation, who left, who joined, size)."""
        old = self.generation
        lost_nodes = [old.members[r] for r in lost if 0 <= r < len(old.members)]
        self._leave_group()
        gen = self.rendezvous.join(lost_nodes, after=old.number)
        self._stop_heartbeat()
        self._join_seen = self._pending = False
        self.generation = gen
        try:
            self._connect(gen.store_addr, gen.store_port, gen.rank_of(self.node), len(gen.members), host=False)
        except (RuntimeError, dist.DistError) as exc:  # a member died before it connected: form again
            raise PeerLost(f"node {self.node}: generation {gen.number} did not form ({one_line(exc)[:200]})") from None
        self.rendezvous.retire(gen.number)  # every member is in the new group: the old stores serve nobody
        return self._change(old.members, gen)

    def share(self, progress: int, state) -> bytes | None:
        """After a membership change: every rank takes the state of the rank that went furthest
        (the highest `progress`, the lowest rank among equals; a lost gradient all-reduce may
        have completed on some survivors and not on others, and a newcomer has none). `state()`
        makes this rank's bytes if it is the source; returns the source's bytes, None on the source.
        A fixed world calls it at its start with progress 0 everywhere: rank 0 is the source."""
        if self.world_size == 1:  # the only rank is the source: nothing to make or send
            return None
        rows = self.gather_stats([float(progress)])
        best = max(range(self.world_size), key=lambda r: (rows[r][0], -r))
        # bytes as a length and a uint8 tensor, not broadcast_object_list: nothing read from the
        # network is unpickled here (the state's own loader decides what it accepts)
        data = state() if self.rank == best else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.small_device)
        self._collective("the state broadcast", functools.partial(dist.broadcast, src=best), size)
        buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.rank == best
               else torch.empty(int(size.item()), dtype=torch.uint8, device=self.small_device))
        self._collective("the state broadcast", functools.partial(dist.broadcast, src=best), buf)
        return None if self.rank == best else buf.numpy().tobytes()

    def mark_over(self, outcome: str) -> None:
        with contextlib.suppress(Exception):  # best effort: the run's result is already written
            self.rendezvous.mark_over(outcome)

    def _leave_group(self) -> None:
        """Drop the failed process group. NCCL: aborted, its kernels may wait forever. gloo: a
        collective still waiting for a frozen peer cannot be aborted, and destroying its group
        waits for it (up to the timeout); holding the group, its backend and the work keeps their
        destructors from running, so the group is dropped at once and the work ends on its own
        (at gloo's timeout) in its thread. Kept until the process ends."""
        if self._nccl:
            self._fail()
        if self._in_flight is not None and not self._in_flight.is_completed():
            with contextlib.suppress(Exception):
                world = dist.group.WORLD
                self._graveyard.append((world, world._get_backend(torch.device("cpu")), self._in_flight,
                                        list(self._groups)))
        self._in_flight = None
        with contextlib.suppress(Exception):
            dist.destroy_process_group()

    def _stop_heartbeat(self) -> None:
        if self._hb is not None and not self._hb.stop(CLOSE_JOIN_S):
            log.warning("rank %d: the heartbeat thread is still in a store call", self.rank)

    def close(self, clean: bool = True) -> None:
        """Leave the group. The heartbeat and watchdog threads are joined first: a daemon thread
        still inside a torch call when the interpreter exits aborts the whole process ("terminate
        called without an active exception", exit 134; tests/test_peers_exit.py reproduces it).
        After a clean end (every rank leaves after the same iteration), rank 0 waits for the others'
        last store call before it goes, since its process hosts the store. An NCCL group left after
        a failure is aborted: destroying it would wait for kernels that never end."""
        if self._hb is None:  # elastic, never connected
            self._dog.stop(3.0)
            if self.rendezvous is not None:
                self.rendezvous.close()
            return
        for thread, wait_s in ((self._hb, CLOSE_JOIN_S), (self._dog, 3.0)):
            if not thread.stop(wait_s):
                log.warning("rank %d: the %s thread is still in a store call at exit", self.rank, thread.name)
        if self._nccl and (self._failed or not clean):
            self._fail()
        elif dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        if clean:
            self._closing_handshake()
        if self.rendezvous is not None:
            self.rendezvous.close()

    def _closing_handshake(self) -> None:
        try:
            if self.rank != 0:
                self.keys.add("closed", 1)
                return
            deadline = time.monotonic() + min(CLOSE_JOIN_S, self.cfg.timeout_s)
            while self.keys.add("closed", 0) < self.world_size - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - a peer or the store is gone; nothing left to protect
            pass
