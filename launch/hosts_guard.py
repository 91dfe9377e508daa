"""Guard of an emulated network (launch.hosts): removes it however the launcher ends.

Started by launch.hosts as `python launch/hosts_guard.py PREFIX` in a session of its own, with a
pipe as stdin. It reads until EOF, which comes when the launcher exits OR is SIGKILLed; then it
SIGKILLs every process still in the network's namespaces (the nodes and their workers), deletes
the namespaces (their veth ends go with them), the bridge and the hosts' /etc/netns files.
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


def kill_inside(name: str) -> int:
    pids = [int(p) for p in ip("netns", "pids", name).stdout.split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def remove(prefix: str) -> None:
    """Everything named PREFIX...: processes in the namespaces, the namespaces, the bridge."""
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
