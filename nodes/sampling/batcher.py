"""Batcher: a background thread that turns finished trajectory slots into learner batches.

It collects finished slot numbers from the trajectory queue and copies a full batch out of shared
memory ahead of time, so the copy overlaps the learner's previous step; the batch's slots go back
to the rollout workers when the learner takes it (fewer samples queued: less policy lag). It can
also hand over a partial batch on request: that is how a node that is behind its peers
contributes the samples it has instead of stalling them (nodes.node).

In rounds (sampler.mode=sync or deterministic) a batch is one rollout of every env, the k-th
batch exactly the envs' k-th rollouts, ordered by env (so its contents do not depend on which
worker finished first), and its slots go back to the envs only on `release`.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch

from nodes.errors import WorkerFailed, one_line
from nodes.record.profile import BATCHER, BATCHER_ROW, Clock
from nodes.sampling.buffers import SlotBatch

WAIT, COPY = BATCHER.index("wait"), BATCHER.index("copy")


class DeviceFeed:
    """Batches for a learner on a GPU: slots are gathered into one of two pinned host buffers and
    copied to the device on a side stream, so the copy overlaps the learner's step; the learner's
    stream waits on the batch's event (SlotBatch.to). Pinned memory makes the copy asynchronous
    (from pageable memory it would block this thread and serialise with the learner). A host
    buffer is reused two batches later, after its copy's event has completed. `versions` stays on
    the host: the learner reads the policy lag from it without a device sync.

    On the CPU (device=cpu) nothing is pinned and no stream is used: tests run the same gathering."""

    def __init__(self, buffers, per_batch: int, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.host = [{name: torch.empty((per_batch, *getattr(buffers, name).shape[1:]),
                                        dtype=getattr(buffers, name).dtype, pin_memory=self.cuda)
                      for name in SlotBatch.FIELDS} for _ in range(2)]
        self.events: list = [None, None]
        self.next = 0

    def gather(self, buffers, slots: list[int]) -> SlotBatch:
        k, n = self.next, len(slots)
        self.next ^= 1
        if self.events[k] is not None:
            self.events[k].synchronize()  # this host buffer's previous copy is done (long since)
        idx = torch.as_tensor(slots, dtype=torch.int64)
        host = {name: torch.index_select(getattr(buffers, name), 0, idx, out=self.host[k][name][:n])
                for name in SlotBatch.FIELDS}
        if not self.cuda:
            return SlotBatch(**{name: t.clone() for name, t in host.items()})
        torch.cuda.set_device(self.device)  # the current device is per thread
        with torch.cuda.stream(self.stream):
            fields = {name: (t.clone() if name == "versions" else t.to(self.device, non_blocking=True))
                      for name, t in host.items()}
            self.events[k] = torch.cuda.Event()
            self.events[k].record(self.stream)
        batch = SlotBatch(**fields)
        batch.ready = self.events[k]
        return batch


class Batcher(threading.Thread):
    def __init__(self, buffers, channels, per_batch: int, stop: threading.Event, device: torch.device | None = None,
                 rounds: bool = False, control=None, member: int = 0):
        """device: the learner's; on a GPU, batches arrive there through a DeviceFeed. rounds: a
        batch is one round (per_batch = the envs), and its slots go back to the rollout workers
        only on `release` (nodes.node decides when: that is what makes the policy lag 0 or 1),
        by counting the round in control.rounds_released: each env owns its slots; `preempt`
        ends the current round early through control.cut_round. member: the population member
        whose trajectories (channels.trajectories[member]) it batches: one batcher per member."""
        super().__init__(name=f"the batcher of population member {member}" if member else "the batcher", daemon=True)
        self.queue = channels.trajectories[member]
        self.buffers, self.ch, self.per_batch, self.stop_event = buffers, channels, per_batch, stop
        self.rounds, self.control = rounds, control
        assert not rounds or control is not None, "rounds need the shared control block"
        self.round = 0  # rounds: the round the next batch is made of
        self.feed = DeviceFeed(buffers, per_batch, device) if device is not None and device.type == "cuda" else None
        self.cond = threading.Condition()
        self.pending: list[int] = []  # finished slots not yet in a batch
        self.ready: SlotBatch | None = None  # a full batch copied out ahead of time
        self.error: BaseException | None = None
        # set when this member's batch is ready (one event for every member's batcher: nodes.sampling.sampler)
        self.notify: threading.Event | None = None
        # this thread's phase split (nodes.record.profile; a population's first member's batcher)
        self.clock = Clock(control.profile.numpy()[BATCHER_ROW] if control is not None and not member else None)

    def _next_slots(self) -> list[int] | None:
        """The slots of the next full batch, taken out of `pending`; None while it is not full."""
        if len(self.pending) < self.per_batch:
            return None
        if not self.rounds:
            slots, self.pending = self.pending[: self.per_batch], self.pending[self.per_batch :]
            return slots
        of_round = (self.buffers.slot_round[self.pending] == self.round).tolist()
        if sum(of_round) < self.per_batch:
            return None
        slots = [s for s, mine in zip(self.pending, of_round) if mine]
        self.pending = [s for s, mine in zip(self.pending, of_round) if not mine]
        self.round += 1
        return sorted(slots, key=lambda s: int(self.buffers.slot_env[s]))

    def _cut(self, slots: list[int]) -> SlotBatch:
        """A batch copied out of `slots`. Its slots go back to the rollout workers only when the
        learner takes it (`_hand_over`), not when it is copied ahead of time: slots freed at the
        copy were filled again while the batch waited, a whole batch more of samples queued ahead
        of the learner, one more version of policy lag when the learner is the bottleneck."""
        batch = self.feed.gather(self.buffers, slots) if self.feed else SlotBatch.copy_slots(self.buffers, slots)
        batch.slots = slots
        batch.lengths = self.buffers.slot_len[slots].clone()  # async: a member's episode may end a slot early
        if self.rounds:  # a preempted round: every rollout as long as the shortest
            batch.truncate(int(batch.lengths.min()))
        return batch

    def _hand_over(self, batch: SlotBatch | None) -> SlotBatch | None:
        if batch is not None and not self.rounds:
            self.ch.free_slots.put_many(batch.slots)
        return batch

    def release(self, batch: SlotBatch | None) -> None:
        """rounds=True: give a batch's slots back to their envs (None: nothing). Rounds are
        batched and released in order, so counting them says which slots are free."""
        if self.rounds and batch is not None:
            self.control.rounds_released += 1

    def preempt(self) -> None:
        """Rounds: end the round being collected as soon as its rollouts have the minimum length
        (not the next one: a round already batched, not yet taken, is the one waited for)."""
        with self.cond:
            if self.ready is None:
                self.control.cut_round[0] = self.round

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.clock(WAIT)
                try:
                    got = self.queue.get_many(timeout=0.05)
                except queue.Empty:
                    got = []
                with self.cond:
                    self.pending += got
                    if self.ready is None and (slots := self._next_slots()) is not None:
                        self.clock(COPY)
                        self.ready = self._cut(slots)
                        self.cond.notify_all()
                        if self.notify is not None:
                            self.notify.set()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main loop
            self.error = exc

    def check(self) -> None:
        """A batcher thread that raised ends the run: WorkerFailed naming it, with its error."""
        if self.error is not None:
            exc = self.error
            raise WorkerFailed(f"{self.name} failed: {type(exc).__name__}: {one_line(exc)}") from exc

    def get_full(self, timeout: float) -> SlotBatch | None:
        self.check()
        with self.cond:
            if self.ready is None:
                self.cond.wait(timeout)
            batch, self.ready = self.ready, None
        return self._hand_over(batch)

    def held(self) -> int:
        """Finished slots this batcher holds toward its batches (batched or pending). In rounds only
        the round being batched counts: at the start the envs collect rounds 0 and 1 at once, so
        a worker that is a round ahead puts round-1 slots in `pending` before round 0 is whole."""
        with self.cond:
            if self.rounds:
                if self.ready is not None:
                    return len(self.ready.slots)
                return int((self.buffers.slot_round[self.pending] == self.round).sum())
            return len(self.pending) + (len(self.ready.slots) if self.ready is not None else 0)

    def take_partial(self, min_slots: int) -> SlotBatch | None:
        """A full batch if there is one, else every pending slot if there are at least min_slots."""
        self.check()
        with self.cond:
            if self.ready is not None:
                batch, self.ready = self.ready, None
                return self._hand_over(batch)
            if not self.rounds and len(self.pending) >= max(min_slots, 1):  # in rounds: whole rounds only
                n = min(len(self.pending), self.per_batch)
                slots, self.pending = self.pending[:n], self.pending[n:]
                return self._hand_over(self._cut(slots))
        return None


def wait_for_batches(batchers: list[Batcher], peers, tick: int, straggler: bool, min_slots: int,
                     idle: Callable[[], None], ready: threading.Event) -> tuple[list[SlotBatch | None], bool]:
    """The batches of one learner iteration, one per population member (one policy: a population of
    one), and whether any was cut short. `ready` is the event every batcher sets when its batch is
    ready; `idle()` runs between polls (the node takes its workers' reports and checks they live).

    Every member learns in every iteration, on a full batch each once all have one; then this rank
    tells its peers it is ready for `tick`. Otherwise every member takes what it has (a full batch,
    at least `min_slots` trajectories, or nothing: None, and its learner joins the member's
    all-reduce with no samples) once
    - the batchers hold as many slots as the members' batches together: members whose envs play
      unequal shares (self-play draws) would make the others' trajectories pile up until no slot
      is free;
    - or, with straggler handling, enough peers are ready (`peers.others_ready`): a node that is
      behind contributes what it has (the all-reduce weights it by its sample count). In rounds
      (sync mode) the round instead ends early, every rollout at least sync.min_batch_frac of T
      long (DD-PPO's preemption), and its batch counts as cut short.
    A batcher that failed ends the wait (WorkerFailed naming its member).
    """
    # with peers, poll often: a late look at their readiness is time they spend waiting
    poll_s = 0.002 if peers.world_size > 1 else 0.05
    needed = sum(b.per_batch for b in batchers)
    rounds = batchers[0].rounds
    while True:
        ready.clear()  # before looking: a batch made after this sets it again
        for b in batchers:
            b.check()
        # every slot of a full batch in hand counts as full, whether or not the batcher thread has
        # assembled it yet (else this rank could take a full batch without telling its peers)
        full = all(b.ready is not None for b in batchers) or sum(b.held() for b in batchers) >= needed
        if full:
            peers.mark_ready(tick)
        others = straggler and not full and peers.others_ready(tick)
        if others and rounds:
            for b in batchers:
                b.preempt()
        elif full or others:
            batches = [b.take_partial(min_slots) for b in batchers]
            if any(batch is not None for batch in batches):
                return batches, any(cut_short(x, b) for x, b in zip(batches, batchers))
        idle()
        ready.wait(poll_s)


def cut_short(batch: SlotBatch | None, batcher: Batcher) -> bool:
    """Fewer trajectories than a batch (straggler), or shorter rollouts (a preempted round)."""
    return batch is None or len(batch.rewards) < batcher.per_batch or batch.rewards.shape[1] < batcher.buffers.rollout
