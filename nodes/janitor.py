"""Janitor: make sure no node process and no VizDoom segment outlives the trainer.

Started by the node's main process as `python nodes/janitor.py` in a new process group whose id
is its own pid; every worker joins that group, and VizDoom engines inherit it. The janitor reads
its stdin until EOF, which comes when the main process exits OR is SIGKILLed. Then it SIGKILLs
every other member of the group (VizDoom engines ignore SIGTERM) and removes the /dev/shm
segments of the VizDoom instances it saw (`+viz_instance_id` on the engine command line), and the
`/dev/shm/cuda.shm.*.<pid in hex>.*` file the CUDA driver makes for each process that uses CUDA
IPC (the policy workers map the learner's weights so) and removes only at a clean exit, which a
multiprocessing child (`os._exit`) or a killed process never has.
Standalone on purpose (stdlib only, run by path) so it starts fast and imports nothing of ours.
"""
import contextlib
import glob
import os
import re
import select
import signal
import sys
import time

INSTANCE_ARG = re.compile(rb"\+viz_instance_id\x00([^\x00]+)")


def group_members(pgid: int):
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            # fields after the command (which may hold spaces) start after the last ')'
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                yield int(d)
        except (OSError, ValueError, IndexError):
            continue


def scan(pgid: int, instances: set, seen: set) -> list:
    pids = list(group_members(pgid))
    seen.update(pids)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                m = INSTANCE_ARG.search(f.read())
            if m:
                instances.add(m.group(1).decode())
        except OSError:
            pass
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep(pgid: int, instances: set, seen: set) -> None:
    deadline = time.time() + 10
    while time.time() < deadline:
        pids = scan(pgid, instances, seen)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for inst in instances:
        for path in glob.glob(f"/dev/shm/ViZDoom*{inst}"):
            with contextlib.suppress(OSError):
                os.unlink(path)
    for pid in seen:
        if not alive(pid):  # a pid reused since by a live process keeps its file
            for path in glob.glob(f"/dev/shm/cuda.shm.*.{pid:x}.*"):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pgid = os.getpgrp()
    instances: set = set()
    seen: set = set()
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready and not os.read(fd, 4096):
            break  # EOF: the main process is done or dead
        scan(pgid, instances, seen)
    sweep(pgid, instances, seen)


if __name__ == "__main__":
    main()
