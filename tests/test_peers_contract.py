"""One contract, every implementation of nodes.run.peers.Peers (as TorchRL tests its backends): each
check below runs against Solo in this process and against DistPeers in a real 2-rank gloo group
on 127.0.0.1, where every check runs on both ranks, in the same order, as the node loop calls them.
Checks are written in terms of peers.rank and peers.world_size, so one text holds for any world."""
import hashlib
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
from nodes.run.peers import NO_SIGNAL, Peers, Solo, vote_flags, world_vote

CHECKS = {}


def contract(fn):
    CHECKS[fn.__name__] = fn
    return fn


def barrier(peers):
    peers.all_sum(torch.zeros(1))


def tiny_model(seed):
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    model.register_buffer("stat", torch.full((2,), float(seed)))
    return model


@contract
def rank_and_writer(peers):
    assert 0 <= peers.rank < peers.world_size
    assert peers.is_writer == (peers.rank == 0)


@contract
def reduce_gradients_is_the_sample_weighted_mean(peers):
    model = nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.full_like(model.weight, float(peers.rank + 1))
    total, stop = peers.reduce_gradients(model, 10 * (peers.rank + 1))
    counts = [10 * (r + 1) for r in range(peers.world_size)]
    assert total == sum(counts) and stop == 0
    expected = sum(n * (r + 1) for r, n in enumerate(counts)) / sum(counts)
    assert torch.allclose(model.weight.grad, torch.full_like(model.weight, expected))


@contract
def one_ranks_stop_vote_reaches_every_rank_with_the_gradients(peers):
    """The last rank votes on SIGUSR2, rank 0 (when it is another) on its time limit: every rank
    learns from the same all-reduce that the world stops on SIGUSR2 (a rank whose own signal has
    not come stops as the others do), and the votes leave the gradients' mean alone."""
    model = nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.ones_like(model.weight)
    last = peers.rank == peers.world_size - 1
    vote = signal.SIGUSR2 if last else NO_SIGNAL if peers.rank == 0 else 0
    total, stop = peers.reduce_gradients(model, 4, vote)
    assert stop == signal.SIGUSR2 and total == 4 * peers.world_size
    assert torch.allclose(model.weight.grad, torch.ones_like(model.weight))


@contract
def sums_ride_in_the_gradient_all_reduce_unweighted(peers):
    """The running norms' moments travel with the gradients: summed over ranks in place, not
    weighted by sample counts, and the gradients' weighted mean is unchanged by them."""
    model = nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.full_like(model.weight, float(peers.rank + 1))
    sums = torch.tensor([1.0, float(peers.rank), -2.5])
    total, _ = peers.reduce_gradients(model, 10 * (peers.rank + 1), sums=sums)
    n = peers.world_size
    assert sums.tolist() == [float(n), float(sum(range(n))), -2.5 * n]
    counts = [10 * (r + 1) for r in range(n)]
    expected = sum(c * (r + 1) for r, c in enumerate(counts)) / sum(counts)
    assert total == sum(counts) and torch.allclose(model.weight.grad, torch.full_like(model.weight, expected))


@contract
def all_sum_sums_in_place(peers):
    t = torch.tensor([1.0, float(peers.rank)])
    out = peers.all_sum(t)
    assert out is t
    assert t.tolist() == [float(peers.world_size), float(sum(range(peers.world_size)))]


@contract
def gather_stats_returns_every_ranks_row_by_rank(peers):
    rows = peers.gather_stats([float(peers.rank), 2.5, -1.0])
    assert rows == [[float(r), 2.5, -1.0] for r in range(peers.world_size)]


@contract
def check_agreement_returns_one_checksum_per_rank(peers):
    model = tiny_model(7)
    assert peers.check_agreement(model, 1) == [param_checksum(model)] * peers.world_size


@contract
def check_agreement_raises_when_a_rank_differs(peers):
    model = tiny_model(7)
    last = peers.world_size - 1
    if last == 0:  # one rank cannot differ from itself
        assert peers.check_agreement(model, 2) == [param_checksum(model)]
        return
    if peers.rank == last:
        with torch.no_grad():
            model.weight[0, 0] += 1.0
    with pytest.raises(RuntimeError, match=rf"parameters diverged at policy version 2: ranks \[{last}\]"):
        peers.check_agreement(model, 2)


def run_digest(model, extra):
    """What ranks compare when the caller gives the run's other state: sha256(parameter digest + extra)."""
    return hashlib.sha256(bytes.fromhex(param_checksum(model)) + extra).hexdigest()


@contract
def check_agreement_with_extra_compares_parameters_and_run_state(peers):
    model = tiny_model(7)
    extra = b"version 3, frames 1024"
    assert peers.check_agreement(model, 3, extra) == [run_digest(model, extra)] * peers.world_size
    assert peers.last_checksum == param_checksum(model)  # the summary's digest: the parameters' alone
    assert peers.check_agreement(model, 3, b"") == [param_checksum(model)] * peers.world_size


@contract
def check_agreement_names_run_state_when_only_extra_differs(peers):
    model = tiny_model(7)
    last = peers.world_size - 1
    extra = b"frames 1024" if peers.rank != last or last == 0 else b"frames 2048"
    if last == 0:
        assert peers.check_agreement(model, 4, extra) == [run_digest(model, extra)]
        return
    with pytest.raises(RuntimeError, match=rf"run state diverged at policy version 4: ranks \[{last}\]"):
        peers.check_agreement(model, 4, extra)
    assert peers.last_checksum == param_checksum(model)  # from the call above: kept


@contract
def check_agreement_names_parameters_when_they_differ_whatever_extra(peers):
    model = tiny_model(7)
    last = peers.world_size - 1
    if peers.rank == last and last > 0:
        with torch.no_grad():
            model.weight[0, 0] += 1.0
    extra = bytes([peers.rank])  # differs too: the parameters are named first
    if last == 0:
        assert peers.check_agreement(model, 5, extra) == [run_digest(model, extra)]
        return
    with pytest.raises(RuntimeError, match=rf"parameters diverged at policy version 5: ranks \[{last}\]"):
        peers.check_agreement(model, 5, extra)


@contract
def share_with_equal_progress_gives_every_rank_rank0s_state(peers):
    """A fixed world at its start: progress 0 everywhere; state() runs on rank 0 alone, and only when
    another rank needs it (one rank: never)."""
    made = []

    def state():
        made.append(peers.rank)
        return f"state of rank {peers.rank}".encode()

    got = peers.share(0, state)
    assert made == ([0] if peers.rank == 0 and peers.world_size > 1 else [])
    assert got == (None if peers.rank == 0 else b"state of rank 0")


@contract
def share_takes_the_state_of_the_rank_that_went_furthest(peers):
    best = peers.world_size - 1
    got = peers.share(10 if peers.rank == best else 5, lambda: f"state of rank {peers.rank}".encode())
    assert got == (None if peers.rank == best else f"state of rank {best}".encode())


@contract
def others_ready_once_enough_ranks_marked_the_version(peers):
    version = 12345
    assert not peers.others_ready(version)  # nobody has marked it
    barrier(peers)
    if peers.rank != 0:
        peers.mark_ready(version)
    barrier(peers)
    time.sleep(0.05)  # past any cached answer
    # rank 0 waits on the others; ready_frac (0.5) of 2 ranks is one rank: rank 1 marked it
    assert peers.others_ready(version) == (peers.world_size > 1)
    barrier(peers)


@contract
def others_ready_answers_for_the_version_asked_even_from_its_cache(peers):
    """A straggler asks about the next version right after the last one was ready: DistPeers reads the
    store at most every few ms, and an answer kept from the last read is that version's alone (it
    answered the previous iteration's "ready", and the straggler cut its batch on it)."""
    version = 23456
    barrier(peers)
    if peers.rank != 0:
        peers.mark_ready(version)
    barrier(peers)
    time.sleep(0.05)  # past any cached answer: the next call reads the store
    assert peers.others_ready(version) == (peers.world_size > 1)  # read now, kept for the read gap
    assert not peers.others_ready(version + 1)  # asked at once, within the gap: nobody marked it
    barrier(peers)


def test_every_method_is_abstract_so_no_implementation_can_forget_one():
    assert {"reduce_gradients", "all_sum", "gather_stats", "check_agreement", "share", "mark_ready",
            "others_ready", "close"} <= Peers.__abstractmethods__

    class Forgetful(Peers):  # implements everything but others_ready
        def add_members(self, members): ...
        def reduce_gradients(self, model, num_samples, vote=0, sums=None, member=0): ...
        def all_sum(self, tensor): ...
        def gather_stats(self, values): ...
        def check_agreement(self, model, version, extra=b""): ...
        def share(self, progress, state): ...
        def mark_ready(self, version): ...
        def close(self, clean=True): ...

    with pytest.raises(TypeError, match="others_ready"):
        Forgetful()


@pytest.mark.parametrize("check", list(CHECKS))
def test_solo(check):
    peers = Solo()
    CHECKS[check](peers)
    peers.close()


def _rank(rank, port, out_dir):
    from sync.dist_peers import DistPeers
    from sync.world import World

    peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), compose("sync.timeout_s=30").sync)
    results = {}
    for name, check in CHECKS.items():
        try:
            check(peers)
            results[name] = "ok"
        except BaseException:  # noqa: BLE001 - reported to the test in the parent
            results[name] = traceback.format_exc()
    peers.close()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def dist_results(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("peers"))
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(2)]


@pytest.mark.parametrize("check", list(CHECKS))
def test_dist_peers_two_ranks(dist_results, check):
    for rank, results in enumerate(dist_results):
        assert results[check] == "ok", f"rank {rank}:\n{results[check]}"


@pytest.mark.parametrize("votes, world", [
    ((0, 0, 0), 0),
    ((NO_SIGNAL, 0), NO_SIGNAL),  # a time limit: no signal to stop by
    ((signal.SIGUSR2, 0, signal.SIGUSR2), signal.SIGUSR2),
    ((signal.SIGTERM, NO_SIGNAL), signal.SIGTERM),
    ((signal.SIGINT, signal.SIGUSR2), NO_SIGNAL),  # different signals (their mean, 7, is SIGBUS)
    ((signal.SIGTERM, signal.SIGTERM, signal.SIGINT), NO_SIGNAL),
])
def test_the_world_vote_is_the_signal_every_signalled_rank_got(votes, world):
    summed = [sum(column) for column in zip(*(vote_flags(v) for v in votes))]
    assert world_vote(*torch.tensor(summed, dtype=torch.float32).tolist()) == world
