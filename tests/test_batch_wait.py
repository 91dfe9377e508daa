"""The learners' batch wait (nodes.sampling.batcher.wait_for_batches), straggler branch included, in-process.

Real shared buffers and the real Batcher thread; the trajectory queue is a list and the peers
are a stand-in whose readiness the test sets, so every decision is checked exactly: which slots
a batch holds, whether it was cut short, and when this rank tells its peers it is ready."""
import queue
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import compose

from nodes.envs import EnvSpec
from nodes.errors import WorkerFailed
from nodes.sampling.batcher import Batcher, wait_for_batches
from nodes.sampling.buffers import allocate

PER_BATCH, ROLLOUT = 4, 2


class ListQueue:
    def __init__(self):
        self.items, self.lock = [], threading.Lock()

    def put_many(self, xs, timeout=None):
        with self.lock:
            self.items.extend(xs)

    def get_many(self, timeout=None, **_):
        with self.lock:
            got, self.items = self.items, []
        if not got:
            threading.Event().wait(min(timeout or 0.0, 0.01))
            raise queue.Empty
        return got


class StubPeers:
    world_size = 2

    def __init__(self, others_ready=False):
        self.ready, self.marked, self.asked = others_ready, [], 0

    def mark_ready(self, version):
        self.marked.append(version)

    def others_ready(self, version):
        self.asked += 1
        return self.ready


@pytest.fixture
def setup():
    s = compose("env=gym", "sampler.num_workers=1", "sampler.envs_per_worker=2", f"sampler.rollout={ROLLOUT}",
                f"sampler.batch_size={PER_BATCH * ROLLOUT}", "sampler.num_slots=8").sampler
    buffers = allocate(EnvSpec((3,), np.float32, (2,)), s, 2)
    for slot in range(buffers.num_slots):
        buffers.obs[slot] = float(slot)  # every row of a batch says which slot it came from
    ch = SimpleNamespace(trajectories=[ListQueue(), ListQueue()], free_slots=ListQueue())
    stop = threading.Event()
    batcher = Batcher(buffers, ch, PER_BATCH, stop)
    batcher.notify = READY
    batcher.start()
    yield batcher, ch
    stop.set()
    batcher.join(5)


READY = threading.Event()


def wait_for_batch(batcher, peers, tick, straggler, min_slots, idle):
    """One policy: a population of one."""
    batches, partial = wait_for_batches([batcher], peers, tick, straggler, min_slots, idle, READY)
    assert len(batches) == 1
    return batches[0], partial


def slots_of(batch):
    return [int(x) for x in batch.obs[:, 0, 0]]


def feeder(ch, schedule):
    """idle(): on its n-th call, finish the slots schedule[n] (what rollout workers would do)."""
    calls = []

    def idle():
        calls.append(1)
        ch.trajectories[0].put_many(schedule.get(len(calls), []))
    return idle, calls


def test_full_batch_marks_this_rank_ready(setup):
    batcher, ch = setup
    peers = StubPeers(others_ready=True)
    ch.trajectories[0].put_many([3, 1, 4, 0])
    batch, partial = wait_for_batch(batcher, peers, 7, True, 2, lambda: None)
    assert (slots_of(batch), partial, peers.marked) == ([3, 1, 4, 0], False, [7])
    assert sorted(ch.free_slots.items) == [0, 1, 3, 4]  # the slots went back to the workers


def test_straggler_trains_on_what_it_has_once_the_others_are_ready(setup):
    batcher, ch = setup
    peers = StubPeers(others_ready=False)
    idle, calls = feeder(ch, {1: [5], 3: [2]})
    ch.trajectories[0].put_many([6])

    def ready_after_three():
        idle()
        peers.ready = len(calls) >= 3
    batch, partial = wait_for_batch(batcher, peers, 3, True, 2, ready_after_three)
    assert partial and slots_of(batch) == [6, 5, 2][: len(slots_of(batch))]
    assert len(slots_of(batch)) >= 2 and batch.num_samples == len(slots_of(batch)) * ROLLOUT
    assert peers.marked == []  # a cut-short batch does not count as ready
    assert sorted(ch.free_slots.items) == sorted(slots_of(batch))


def test_straggler_below_the_minimum_keeps_waiting(setup):
    batcher, ch = setup
    peers = StubPeers(others_ready=True)
    idle, calls = feeder(ch, {5: [6]})
    ch.trajectories[0].put_many([7])  # one slot: below min_slots=2 until idle's 5th call adds another
    batch, partial = wait_for_batch(batcher, peers, 0, True, 2, idle)
    assert len(calls) >= 5 and partial and slots_of(batch) == [7, 6]


def test_without_straggler_handling_only_a_full_batch_ends_the_wait(setup):
    batcher, ch = setup
    peers = StubPeers(others_ready=True)
    idle, calls = feeder(ch, {3: [2], 6: [1]})
    ch.trajectories[0].put_many([0, 3])
    batch, partial = wait_for_batch(batcher, peers, 4, False, 1, idle)
    assert (slots_of(batch), partial, peers.marked, peers.asked) == ([0, 3, 2, 1], False, [4], 0)
    assert len(calls) >= 6


def test_a_failure_seen_while_waiting_ends_the_wait(setup):
    batcher, _ = setup

    def idle():
        raise WorkerFailed("rollout worker 0 exited unexpectedly (exit code 1)")
    with pytest.raises(WorkerFailed, match="rollout worker 0"):
        wait_for_batch(batcher, StubPeers(), 0, True, 1, idle)


def test_a_population_members_failed_batcher_ends_the_wait_naming_it(setup):
    """Member 1's batcher thread raised: the wait (which polls the batchers' readiness, not their
    get) ends with one line naming that member, instead of stalling while peers time out."""
    batcher, ch = setup
    second = Batcher(batcher.buffers, ch, PER_BATCH, batcher.stop_event, member=1)
    second.notify = READY
    second.queue = SimpleNamespace(get_many=lambda **_: (_ for _ in ()).throw(OSError("queue gone")))
    second.start()
    second.join(5)
    ch.trajectories[0].put_many([0, 1, 2, 3])  # member 0 has a full batch; member 1 never will
    with pytest.raises(WorkerFailed) as err:
        wait_for_batches([batcher, second], StubPeers(), 0, False, 1, lambda: None, READY)
    assert str(err.value) == "the batcher of population member 1 failed: OSError: queue gone"
