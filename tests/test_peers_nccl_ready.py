"""DistPeers made for NCCL, checked on gloo (no GPU needed): which backend string and which device
each collective uses, and the watched gradient all-reduce, which must name a lost rank within
seconds even when the collective never completes (what a dead peer does to NCCL: its collective
hangs instead of failing). Each scenario is a real 2-rank gloo group on 127.0.0.1, as in
tests/test_peers_contract.py; sync.timeout_s is 300, so a rank named within seconds was named by
the heartbeat watch, not by a timeout."""
import os
import signal
import time
import traceback

import pytest
import torch
import torch.multiprocessing as mp
from helpers import compose, free_port
from torch import nn

from nodes.models.numerics import param_checksum
from sync.dist_peers import PeerLost, collective_devices, group_backend

NAMED_WITHIN_S = 15.0


def test_backend_string_follows_device_and_sync_backend():
    assert group_backend("cuda:0", "nccl") == "cpu:gloo,cuda:nccl"
    assert group_backend("cuda:1", "auto") == "cpu:gloo,cuda:nccl"
    assert group_backend("cuda:0", "gloo") == "gloo"  # gloo with CUDA tensors
    assert group_backend("cpu", "gloo") == "gloo"
    assert group_backend("cpu", "auto") == "gloo"
    with pytest.raises(ValueError, match="sync.backend=nccl needs a CUDA device"):
        group_backend("cpu", "nccl")


def test_small_tensors_go_by_cpu_and_bulk_stays_on_the_model_device():
    assert collective_devices("cuda:0") == (torch.device("cuda:0"), torch.device("cpu"))
    assert collective_devices("cpu") == (torch.device("cpu"), torch.device("cpu"))


# ---------------------------------------------------------------- the ranks' side


class NeverDone:
    """An async work that never completes: NCCL's answer when a peer is gone."""

    def is_completed(self):
        return False

    def wait(self):
        raise AssertionError("wait() on a work that never completed")


def never_completing_all_reduce(dist):
    real = dist.all_reduce

    def all_reduce(tensor, *args, async_op=False, **kw):
        return NeverDone() if async_op else real(tensor, *args, async_op=async_op, **kw)

    dist.all_reduce = all_reduce
    return real


def recorded_collectives(dist, calls):
    """Replace the collectives sync.dist_peers calls by wrappers that record (name, device, dtype) of
    every tensor argument, and the `device`/`async_op` keywords, then call through."""
    def wrap(name, fn):
        def call(*args, **kw):
            tensors = [t for a in args for t in (a if isinstance(a, list) else [a]) if isinstance(t, torch.Tensor)]
            calls.append((name, sorted({(str(t.device), str(t.dtype)) for t in tensors}),
                          str(kw.get("device")), bool(kw.get("async_op"))))
            return fn(*args, **kw)
        return call

    for name in ("all_reduce", "all_gather", "broadcast", "broadcast_object_list"):
        setattr(dist, name, wrap(name, getattr(dist, name)))


def grads_model():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    model(torch.ones(4, 3)).sum().backward()
    return model


def timed_failure(fn):
    t0 = time.monotonic()
    try:
        fn()
    except PeerLost as exc:
        return str(exc), time.monotonic() - t0
    return "no PeerLost raised", time.monotonic() - t0


def scenario_route_then_freeze(peers, results, save):
    """Both ranks: the recorded collectives; rank 0: a never-completing all-reduce with live peers
    (the timeout); then rank 1 freezes and rank 0's real gloo all-reduce hangs (the watch)."""
    import sync.dist_peers

    calls = []
    recorded_collectives(sync.dist_peers.dist, calls)
    model = grads_model()
    peers.share(0, lambda: b"rank 0's run state")  # a fixed world's start
    peers.reduce_gradients(model, 8, sums=torch.zeros(5, device=peers.bulk_device))  # with moments
    peers.gather_stats([1.0, 2.0])
    peers.check_agreement(model, 1)
    results["calls"] = list(calls)  # what the sequence above called, not the barriers after it
    results["devices"] = (str(peers.bulk_device), str(peers.small_device))
    results["last_checksum"] = peers.last_checksum
    if peers.rank == 0:
        real = never_completing_all_reduce(sync.dist_peers.dist)
        peers.cfg.timeout_s = 1.5
        results["timeout"] = timed_failure(lambda: peers.reduce_gradients(model, 8))
        peers.cfg.timeout_s = 300.0
        sync.dist_peers.dist.all_reduce = real
    peers.all_sum(torch.zeros(1))  # rank 1 waits here for rank 0's timeout
    if peers.rank == 1:
        save()
        os.kill(os.getpid(), signal.SIGSTOP)  # alive, sockets open, heartbeat stopped
    results["frozen"] = timed_failure(lambda: peers.reduce_gradients(model, 8))


def scenario_killed(peers, results, save):
    """Rank 1 is killed; rank 0's all-reduce first never completes (NCCL-like), then is a real
    gloo all-reduce, which fails at once on the closed socket."""
    import sync.dist_peers

    model = grads_model()
    peers.check_agreement(model, 1)
    peers.all_sum(torch.zeros(1))
    if peers.rank == 1:
        save()
        os.kill(os.getpid(), signal.SIGKILL)
    real = never_completing_all_reduce(sync.dist_peers.dist)
    results["never_completes"] = timed_failure(lambda: peers.reduce_gradients(model, 8))
    sync.dist_peers.dist.all_reduce = real
    results["gloo"] = timed_failure(lambda: peers.reduce_gradients(model, 8))
    results["last_checksum"] = (peers.last_checksum, param_checksum(model))


SCENARIOS = {"route_then_freeze": scenario_route_then_freeze, "killed": scenario_killed}


def _rank(rank, port, out_dir, scenario):
    from sync.dist_peers import DistPeers
    from sync.world import World

    peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), compose("sync.timeout_s=300").sync)
    results, path = {}, os.path.join(out_dir, f"rank{rank}.pt")

    def save():  # rank 1 saves before it stops; the parent polls for rank 0's file
        torch.save(results, path + ".tmp")
        os.replace(path + ".tmp", path)

    try:
        SCENARIOS[scenario](peers, results, save)
    except BaseException:  # noqa: BLE001 - reported to the test in the parent
        results["error"] = traceback.format_exc()
    save()
    peers.close(clean=False)


def run_world(out_dir, scenario):
    """Both ranks' results; rank 1 (frozen or dead by then) is killed once rank 0 has reported."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out_dir, scenario)) for r in range(2)]
    for p in procs:
        p.start()
    rank0 = os.path.join(out_dir, "rank0.pt")
    deadline = time.monotonic() + 120
    while not os.path.exists(rank0) and procs[0].is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    procs[1].kill()
    procs[1].join(10)
    procs[0].join(60)
    if procs[0].is_alive():
        procs[0].kill()
    assert procs[0].exitcode == 0, f"rank 0 exited {procs[0].exitcode}"
    results = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(2)]
    assert "error" not in results[0], results[0]["error"]
    return results


@pytest.fixture(scope="module")
def freeze_world(tmp_path_factory):
    return run_world(str(tmp_path_factory.mktemp("freeze")), "route_then_freeze")


@pytest.fixture(scope="module")
def killed_world(tmp_path_factory):
    return run_world(str(tmp_path_factory.mktemp("killed")), "killed")


# ---------------------------------------------------------------- the tests


def test_each_collective_uses_the_device_made_for_it(freeze_world):
    cpu = "cpu"
    for rank, results in enumerate(freeze_world):
        assert "calls" in results, f"rank {rank}: {results.get('error')}"
        bulk, small = results["devices"]
        assert (bulk, small) == (cpu, cpu)  # a CPU model: both CPU here; the cuda case is a pure function above
        assert results["calls"] == [
            # every collective under the heartbeat watch (async)
            ("all_gather", [(small, "torch.float64")], "None", True),  # the run state's source: progress
            ("broadcast", [(small, "torch.int64")], "None", True),  # the run state's length
            ("broadcast", [(small, "torch.uint8")], "None", True),  # its bytes, on the CPU (no pickle)
            ("all_reduce", [(bulk, "torch.float32")], "None", True),  # gradients and moments
            ("all_gather", [(small, "torch.float64")], "None", True),  # stats rows
            ("all_gather", [(small, "torch.uint8")], "None", True),  # checksums
        ], f"rank {rank}"
        assert results["last_checksum"] is not None


def test_a_collective_that_never_completes_times_out_when_every_peer_is_alive(freeze_world):
    msg, took = freeze_world[0]["timeout"]
    assert "rank 0: a peer stopped answering during the gradient all-reduce (no answer for 1.5 s)" in msg, msg
    assert 1.5 <= took < 1.5 + 5, took


def test_a_frozen_peer_is_named_while_the_gloo_all_reduce_hangs(freeze_world):
    msg, took = freeze_world[0]["frozen"]
    assert "rank 0: lost rank 1 during the gradient all-reduce" in msg, msg
    assert took < NAMED_WITHIN_S, took


def test_a_killed_peer_is_named_while_the_all_reduce_never_completes(killed_world):
    msg, took = killed_world[0]["never_completes"]
    assert "rank 0: lost rank 1 during the gradient all-reduce" in msg, msg
    assert took < NAMED_WITHIN_S, took


def test_gloo_still_fails_at_once_on_a_killed_peer_and_the_checksum_is_kept(killed_world):
    msg, took = killed_world[0]["gloo"]
    assert "rank 0: lost rank 1 during the gradient all-reduce" in msg, msg
    assert took < NAMED_WITHIN_S, took
    kept, model_now = killed_world[0]["last_checksum"]
    assert kept == model_now  # what the summary reports after the failure, without touching the device
