"""Guard of an emulated network (launch.spawn.hosts): removes it however the launcher ends.

Started by launch.spawn.hosts as `python launch/spawn/hosts_guard.py PREFIX` in a session of its own, with a
pipe as stdin. It reads until EOF, which comes when the launcher exits OR is SIGKILLed; then it
SIGKILLs the nodes' main processes in the network's namespaces and gives their own cleaners a few
seconds (each node's janitor kills its workers and VizDoom engines and removes their /dev/shm
segments; multiprocessing's resource tracker unlinks the node's named semaphores, /dev/shm/sem.mp-*,
which nothing else would), then SIGKILLs whatever is still there and deletes the namespaces (their
veth ends go with them), the bridge and the hosts' /etc/netns files.
Standalone on purpose (stdlib only, run by path): it starts fast and imports nothing of ours, like
nodes/janitor.py.
"""
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import time


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def namespaces(prefix: str) -> list[str]:
    names = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix + "h")]


def inside(name: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", name).stdout.split()]


def is_node(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"launch.node" in f.read()
    except OSError:
        return False


def kill_inside(name: str, only=lambda pid: True) -> int:
    pids = [p for p in inside(name) if only(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


CLEANERS_S = 5.0  # the janitors' sweep (0.5 s to notice, ~1 s to kill) and the resource trackers'


def remove(prefix: str) -> None:
    """Everything named PREFIX...: processes in the namespaces, the namespaces, the bridge."""
    if sum(kill_inside(n, is_node) for n in namespaces(prefix)):
        deadline = time.time() + CLEANERS_S
        while time.time() < deadline and any(inside(n) for n in namespaces(prefix)):
            time.sleep(0.1)
    for _ in range(50):  # a process may fork while we kill: until the namespaces are empty
        if not sum(kill_inside(n) for n in namespaces(prefix)):
            break
        time.sleep(0.1)
    for name in namespaces(prefix):
        ip("netns", "del", name)
    ip("link", "del", prefix + "br")
    for etc in glob.glob(f"/etc/netns/{prefix}h*"):  # each host's /etc/hosts
        shutil.rmtree(etc, ignore_errors=True)


def main() -> None:
    prefix = sys.argv[1]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal's group is the launcher's
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(1 << 16):
        pass
    remove(prefix)


if __name__ == "__main__":
    main()
