"""The Batcher thread on its own: real shared buffers, the real thread, a list as the trajectory
queue. Each slot holds values that name it, so a batch's rows, their order and their copy are
checked exactly, and so is which slots go back to the rollout workers, and when."""
import queue
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import compose

from nodes.envs import EnvSpec
from nodes.errors import WorkerFailed
from nodes.sampling.batcher import Batcher
from nodes.sampling.buffers import Control, allocate

PER_BATCH, ROLLOUT = 3, 2


class ListQueue:
    def __init__(self, fail=None):
        self.items, self.lock, self.fail = [], threading.Lock(), fail

    def put_many(self, xs, timeout=None):
        with self.lock:
            self.items.extend(xs)

    def get_many(self, timeout=None, **_):
        if self.fail:
            raise self.fail
        with self.lock:
            got, self.items = self.items, []
        if not got:
            time.sleep(0.005)
            raise queue.Empty
        return got


@pytest.fixture
def parts():
    s = compose("env=gym", "sampler.num_workers=1", "sampler.envs_per_worker=2", f"sampler.rollout={ROLLOUT}",
                f"sampler.batch_size={PER_BATCH * ROLLOUT}", "sampler.num_slots=8").sampler
    buffers = allocate(EnvSpec((3,), np.float32, (2,)), s, 4)
    for slot in range(buffers.num_slots):  # every field of a slot says which slot it is
        buffers.obs[slot] = slot
        buffers.rewards[slot] = slot * 10
        buffers.actions[slot] = slot % 2
        buffers.versions[slot] = slot + 100
        buffers.h0[slot] = -slot
    started = []

    def start(fail=None):
        ch = SimpleNamespace(trajectories=[ListQueue(fail)], free_slots=ListQueue())
        stop = threading.Event()
        batcher = Batcher(buffers, ch, PER_BATCH, stop)
        batcher.start()
        started.append((batcher, stop))
        return batcher, ch, stop
    yield buffers, start
    for batcher, stop in started:
        stop.set()
        batcher.join(5)


def wait_full(batcher, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        batch = batcher.get_full(timeout=0.05)
        if batch is not None:
            return batch
    raise AssertionError("no full batch")


def test_a_full_batch_holds_the_slots_in_arrival_order_and_frees_them_when_taken(parts):
    buffers, start = parts
    batcher, ch, _ = start()
    ch.trajectories[0].put_many([5, 2, 6])
    deadline = time.time() + 5
    while batcher.ready is None and time.time() < deadline:
        time.sleep(0.005)
    assert batcher.ready is not None and ch.free_slots.items == []  # copied ahead of time, slots still held
    batch = wait_full(batcher)
    assert batch.obs[:, 0, 0].tolist() == [5, 2, 6]
    assert batch.rewards[:, 0].tolist() == [50, 20, 60] and batch.versions[:, 0].tolist() == [105, 102, 106]
    assert batch.actions[:, 0, 0].tolist() == [1, 0, 0] and batch.h0[:, 0].tolist() == [-5, -2, -6]
    assert batch.num_samples == PER_BATCH * ROLLOUT
    assert ch.free_slots.items == [5, 2, 6]


def test_the_batch_is_a_copy_of_the_shared_slots(parts):
    buffers, start = parts
    batcher, ch, _ = start()
    ch.trajectories[0].put_many([1, 2, 3])
    batch = wait_full(batcher)
    buffers.obs[1] = 99.0  # a rollout worker reuses the freed slot
    assert batch.obs[0, 0, 0].item() == 1


def test_slots_beyond_a_batch_wait_for_the_next_one(parts):
    _, start = parts
    batcher, ch, _ = start()
    ch.trajectories[0].put_many([0, 1, 2, 3, 4])
    assert wait_full(batcher).obs[:, 0, 0].tolist() == [0, 1, 2]
    t0 = time.time()
    assert batcher.get_full(timeout=0.1) is None and time.time() - t0 >= 0.09  # 2 pending: no batch
    assert ch.free_slots.items == [0, 1, 2]
    ch.trajectories[0].put_many([6])
    assert wait_full(batcher).obs[:, 0, 0].tolist() == [3, 4, 6]


def test_take_partial_gives_what_is_pending_when_enough(parts):
    _, start = parts
    batcher, ch, _ = start()
    ch.trajectories[0].put_many([4])
    time.sleep(0.1)  # the thread has taken it
    assert batcher.take_partial(2) is None and ch.free_slots.items == []  # below the minimum
    ch.trajectories[0].put_many([6])
    time.sleep(0.1)
    batch = batcher.take_partial(2)
    assert batch.obs[:, 0, 0].tolist() == [4, 6] and batch.num_samples == 2 * ROLLOUT
    assert ch.free_slots.items == [4, 6]
    ch.trajectories[0].put_many([1, 2, 3])
    assert wait_full(batcher).obs[:, 0, 0].tolist() == [1, 2, 3]
    ch.trajectories[0].put_many([5, 0, 6])
    time.sleep(0.1)  # cut as a full batch ahead of time: take_partial hands that over
    assert batcher.take_partial(1).obs[:, 0, 0].tolist() == [5, 0, 6]


def test_an_error_in_the_thread_surfaces_in_the_learner(parts):
    _, start = parts
    batcher, _, _ = start(fail=RuntimeError("queue broke"))
    batcher.join(5)
    with pytest.raises(WorkerFailed, match="^the batcher failed: RuntimeError: queue broke$"):
        batcher.get_full(timeout=0.01)
    with pytest.raises(WorkerFailed, match="the batcher failed"):
        batcher.take_partial(1)


def test_the_stop_event_ends_the_thread(parts):
    _, start = parts
    batcher, _, stop = start()
    stop.set()
    batcher.join(2)
    assert not batcher.is_alive()


def test_device_feed_gathers_what_copy_slots_does_into_two_alternating_buffers(parts):
    """The GPU learner's feed (pinned buffers, side stream on CUDA) run on the CPU: the same rows
    as SlotBatch.copy_slots, batches independent of the reused host buffers, versions on the host."""
    import torch

    from nodes.sampling.batcher import DeviceFeed
    from nodes.sampling.buffers import SlotBatch

    buffers, _ = parts
    feed = DeviceFeed(buffers, PER_BATCH, torch.device("cpu"))
    batches = [feed.gather(buffers, slots) for slots in ([4, 1, 2], [0, 3], [5, 6, 0])]
    for got, slots in zip(batches, ([4, 1, 2], [0, 3], [5, 6, 0])):
        want = SlotBatch.copy_slots(buffers, slots)
        for name in SlotBatch.FIELDS:
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert got.num_samples == len(slots) * ROLLOUT and got.versions.device.type == "cpu"
    assert feed.next == 1  # three batches: buffers 0, 1, 0


def test_in_rounds_a_batch_is_one_round_of_every_env_ordered_by_env_and_released_by_count(parts):
    """sampler.mode=sync/deterministic: the k-th batch is exactly the envs' k-th rollouts, in env
    order whatever order they finished in (a later round finishing early waits), and its slots
    go back only on release, counted in the shared released-rounds counter."""
    import torch

    buffers, _ = parts
    # 3 envs, two slots each: slot s holds env s % 3, round s // 3
    buffers.slot_env[:6] = torch.tensor([0, 1, 2, 0, 1, 2])
    buffers.slot_round[:6] = torch.tensor([0, 0, 0, 1, 1, 1])
    ch, stop = SimpleNamespace(trajectories=[ListQueue()], free_slots=ListQueue()), threading.Event()
    control = Control.create(num_workers=1)
    released = control.rounds_released
    buffers.slot_len[:6] = torch.tensor([ROLLOUT] * 3 + [ROLLOUT, 1, ROLLOUT])  # round 1: env 1 preempted
    batcher = Batcher(buffers, ch, 3, stop, rounds=True, control=control)
    batcher.start()
    try:
        ch.trajectories[0].put_many([2, 3, 0, 4])  # env 0 finished round 1 before env 1 finished round 0
        assert batcher.get_full(timeout=0.2) is None
        # 4 slots pending but only 2 of round 0: not a batch in hand (wait_for_batches would take
        # it), and never cut into one with round 1's (sampler.mode=deterministic diverged so)
        assert batcher.held() == 2 and batcher.take_partial(1) is None
        ch.trajectories[0].put_many([1])
        first = wait_full(batcher)
        assert first.obs[:, 0, 0].tolist() == [0, 1, 2] and first.slots == [0, 1, 2]
        assert ch.free_slots.items == [] and int(released) == 0  # held until the learner says
        batcher.preempt()  # the other ranks have round 1: it is to end early
        assert int(control.cut_round) == 1
        ch.trajectories[0].put_many([5])
        second = wait_full(batcher)
        assert second.obs[:, 0, 0].tolist() == [3, 4, 5]
        # cut to the shortest rollout: 1 step each, and the observation after it (the bootstrap)
        assert second.rewards.shape == (3, 1) and second.obs.shape[1] == 2 and second.num_samples == 3
        assert second.h0.shape == first.h0.shape
        batcher.release(first)
        assert int(released) == 1 and ch.free_slots.items == []
    finally:
        stop.set()
        batcher.join(5)
