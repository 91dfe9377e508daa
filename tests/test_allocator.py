"""tcmalloc under the node's processes (launch/process/allocator.py): the entry points start again
with it preloaded, in the same process, once; not where it is missing, already there or refused."""
import os
import subprocess
import sys

import pytest

from launch.process import allocator
from launch.process.allocator import preload_tcmalloc, tcmalloc_library

PROGRAM = """
import os
from launch.process.allocator import preload_tcmalloc
print("start", os.getpid(), flush=True)
preload_tcmalloc()
print("mapped", "libtcmalloc" in open("/proc/self/maps").read(), os.environ["LD_PRELOAD"], flush=True)
"""


def test_a_process_starts_again_once_with_tcmalloc_and_keeps_its_pid():
    if tcmalloc_library() is None:
        pytest.skip("tcmalloc is not installed (./setup.sh installs Debian's libtcmalloc-minimal4)")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DISTRL_MALLOC")}
    env["LD_PRELOAD"] = "libm.so.6"  # a library the user preloaded stays, after tcmalloc
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the program ran twice (the first run's output came before the execve), in one pid, and stopped there
    assert [line.split()[0] for line in lines] == ["start", "start", "mapped"]
    assert lines[0] == lines[1]
    assert lines[2] == f"mapped True {tcmalloc_library()}:libm.so.6"


def test_nothing_starts_again_where_tcmalloc_is_refused_missing_or_already_there(monkeypatch):
    calls = []
    record = lambda *args: calls.append(args)  # noqa: E731 - stands in for os.execve
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: "/lib/libtcmalloc_minimal.so.4")
    preload_tcmalloc({"DISTRL_MALLOC": "system"}, execve=record)
    preload_tcmalloc({"LD_PRELOAD": "/elsewhere/libtcmalloc_minimal.so.4"}, execve=record)
    assert calls == []
    preload_tcmalloc({"PATH": "/bin"}, execve=record)
    (exe, argv, env), = calls
    assert exe == sys.executable and argv[1:] == sys.orig_argv[1:]
    assert env == {"PATH": "/bin", "LD_PRELOAD": "/lib/libtcmalloc_minimal.so.4"}
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: None)
    preload_tcmalloc({"PATH": "/bin"}, execve=record)
    assert len(calls) == 1
