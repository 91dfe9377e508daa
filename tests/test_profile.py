"""The benchmark's instruments: the phase clock splits a process's wall time exactly, shares
average the processes of a kind, and the memory and CPU readers see real child processes."""
import os
import subprocess
import sys
import time

import numpy as np

from nodes import janitor
from nodes.record import memory, profile


def test_clock_puts_every_second_in_exactly_one_phase():
    row = np.zeros(profile.MAX_PHASES)
    clock = profile.Clock(row)
    t0 = time.perf_counter()
    clock(1)
    time.sleep(0.05)
    clock(2)
    time.sleep(0.10)
    clock(1)
    time.sleep(0.05)
    clock(0)
    wall = time.perf_counter() - t0
    assert abs(row.sum() - wall) < 0.01  # nothing lost, nothing counted twice
    assert 0.095 <= row[1] < 0.13 and 0.095 <= row[2] < 0.13 and row[0] < 0.01


def test_shares_average_a_kind_and_leave_out_idle_kinds():
    rows = profile.table_rows(num_policy_workers=1, num_workers=2)
    assert [k for k, _ in rows] == ["learner", "batcher", "policy", "rollout", "rollout"]
    before = np.zeros((len(rows), profile.MAX_PHASES))
    after = before.copy()
    after[0, : len(profile.LEARNER)] = [1, 2, 0, 5, 0, 2, 0, 0, 0]  # learner: wait, forward, backward, optimizer
    wait, env_step = profile.ROLLOUT.index("wait"), profile.ROLLOUT.index("env_step")
    after[3, wait], after[3, env_step] = 3.0, 1.0  # one rollout worker mostly waits,
    after[4, wait], after[4, env_step] = 1.0, 3.0  # the other mostly steps: together half and half
    split = profile.shares(before, after, rows)
    assert set(split) == {"learner", "rollout"}  # the batcher and the policy worker did not run
    assert split["learner"]["backward"] == 0.5 and split["learner"]["forward"] == 0.2
    assert split["rollout"]["wait"] == 0.5 and split["rollout"]["env_step"] == 0.5
    line = profile.format_shares(split)[0]
    assert line.startswith("learner: backward 50%, forward 20%, optimizer 20%, wait 10%")


CHILD = """
import subprocess, sys, time
big = bytearray(200 << 20)  # touched: resident
for i in range(0, len(big), 4096):
    big[i] = 1
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(grandchild.pid, flush=True)
t = time.process_time()
while time.process_time() - t < 1.0:  # burn a second of CPU
    pass
print("busy done", flush=True)
time.sleep(30)
"""


def test_memory_and_cpu_readers_see_the_whole_process_tree():
    base = memory.sample(os.getpid(), time.time())
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert child.stdout.readline().strip() == "busy done"
        pids = janitor.descendants(os.getpid())
        assert child.pid in pids and grandchild in pids
        now = memory.sample(os.getpid(), time.time())
        assert now.processes >= base.processes + 2
        assert now.pss - base.pss > 190 << 20  # the child's 200 MB (PSS: counted once)
        assert now.rss >= now.pss
        assert profile.cpu_seconds([child.pid]) >= 1.0  # its busy second (grandchild included, idle)
        assert profile.cpu_seconds([os.getpid()], tree=False) < profile.cpu_seconds([os.getpid()])
    finally:
        child.kill()
        child.wait()
        subprocess.run(["pkill", "-f", "import time; time.sleep(30)"], check=False)


def test_memory_watch_samples_until_stopped_and_finds_the_peak():
    seen = []
    watch = memory.MemoryWatch(every_s=0.05, on_sample=seen.append).start()
    time.sleep(0.3)
    watch.stop()
    n = len(watch.samples)
    time.sleep(0.1)
    assert n >= 4 and len(watch.samples) == n and seen == watch.samples  # stopped means stopped
    assert watch.peak().pss == max(s.pss for s in watch.samples) > 0
    assert all(s.t >= 0.1 for s in [watch.peak(since_s=0.1)])
