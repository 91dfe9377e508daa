"""Leaving a process group exits cleanly: after a clean close, a rank exits with status 0 even
when rank 0 (the host of the store) freezes and then dies while that rank is shutting down.

Seen in CI: a 2-node Slurm job that had finished training ended FAILED because rank 1 aborted at
exit ("terminate called without an active exception", SIGABRT). Its heartbeat thread was inside
a TCPStore call to rank 0, which was exiting; the call returned while rank 1's interpreter was
shutting down, and a daemon thread coming back into a torch call then aborts the process.
The fix (sync/dist_peers.py close): the threads are joined before leaving, and rank 0 waits until the
other ranks have closed, so no rank is inside a store call when rank 0 goes.

Here rank 0 stops itself (SIGSTOP) right after close() returns and is killed once rank 1 has
closed, i.e. while rank 1 exits; the heartbeat runs back to back (HEARTBEAT_S = 0), so a thread
left running would be inside a store call. Before the fix rank 1 aborted in 6 runs of 6.
"""
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, free_port

RANK = """
import os, signal, sys, time
import sync.dist_peers
sync.dist_peers.HEARTBEAT_S = 0.0  # the heartbeat thread is (almost) always inside a store call
import torch
from tests.helpers import compose
from sync.dist_peers import DistPeers
from sync.world import World
rank, port = int(sys.argv[1]), int(sys.argv[2])
peers = DistPeers(World(rank, 2, rank, "127.0.0.1", port, "env"), compose().sync)
peers.all_sum(torch.ones(3))  # one collective, as every training iteration has
if rank == 1:
    time.sleep(1.0)  # rank 1 is the later one to leave
t0 = time.time()
peers.close(clean=True)
print(f"closed {rank} {t0:.3f} {time.time():.3f}", flush=True)
if rank == 0:
    os.kill(os.getpid(), signal.SIGSTOP)  # a store host that no longer answers, then dies
"""


def spawn(rank, port):
    return subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(port)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("attempt", range(3))
def test_rank_exits_zero_when_store_host_dies_during_its_exit(attempt):
    port = free_port()
    rank0, rank1 = spawn(0, port), spawn(1, port)
    try:
        line0 = rank0.stdout.readline().split()  # rank 0 returns from close() only after rank 1 closed
        line1 = rank1.stdout.readline().split()
        assert line0[:2] == ["closed", "0"] and line1[:2] == ["closed", "1"], (line0, line1)
        time.sleep(0.05)  # rank 1 is now exiting
        os.kill(rank0.pid, signal.SIGKILL)
        out, err = rank1.communicate(timeout=60)
    finally:
        for p in (rank0, rank1):
            p.kill()
            p.communicate()
    assert rank1.returncode == 0, f"rank 1 exited {rank1.returncode}: {err[-1500:]}"
    assert "terminate called" not in err, err[-1500:]
    # the closing handshake: rank 0's close() lasted until rank 1 had started its own
    assert float(line0[3]) >= float(line1[2]), (line0, line1)
