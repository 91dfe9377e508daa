"""tcmalloc under the node's processes: the learner's step stops paying for fresh pages.

glibc's malloc serves every allocation above its mmap threshold (at most 32 MB) with a new mapping
and returns it to the kernel when freed, so each learner step's big tensors (a VizDoom batch's
frames in bf16 are 58 MB, the first convolution's output 36 MB) are faulted in page by page
again: 49,000-50,000 minor faults a step on doom_basic, a fifth of its time on the Xeon VM.
tcmalloc keeps freed memory for the next step: 35 faults, the step alone 474-475 -> 373-393 ms (1
thread; benchmarks/learner_step_faults.py), the node's training 1.10x (docs/benchmarks.md).
jemalloc's defaults return pages too (60,000 faults a step, no faster).

A library has to be preloaded before the process starts, so an entry point (`python -m
launch.train`, `launch.bench`, `launch.limit`, `launch.node`) calls `preload_tcmalloc()` before it
imports anything heavy: it runs the same command again in the same process (execve: the same pid,
what torchrun, srun and Slurm's signals track) with LD_PRELOAD naming tcmalloc, which every
process the node starts inherits. Nothing happens where tcmalloc is not installed (./setup.sh and
the Dockerfile install it: Debian's libtcmalloc-minimal4), where LD_PRELOAD already names a malloc
library (tcmalloc itself, or the user's choice: jemalloc, mimalloc, ...; nodes.record.allocator
knows them by name), or with DISTRL_MALLOC=system (glibc's malloc, as before).

A Slurm job (launcher=slurm) runs on nodes whose libraries may not be the submitting host's: sbatch
gets the environment without tcmalloc (`submitting_without_tcmalloc`), and the job script preloads
the one its node has, if any (`job_preload_line`), so a node without it runs on glibc's malloc without
the loader's line in every task's log (docs/troubleshooting.md quotes it):
    ERROR: ld.so: object '<library>' from LD_PRELOAD cannot be preloaded (cannot open shared object file): ignored.
"""
from __future__ import annotations

import contextlib
import ctypes.util
import os
import shlex
import sys

from nodes.record.allocator import FAMILIES, allocator_of

OPT_OUT = "DISTRL_MALLOC"  # =system: keep glibc's malloc
LIBRARY = "tcmalloc_minimal"  # gperftools' allocator without its profilers
KNOWN_PATHS = tuple(f"/usr/{lib}/libtcmalloc_minimal.so.4"
                    for lib in ("lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib"))


def tcmalloc_library() -> str | None:
    """The path (or soname, which the loader finds) of tcmalloc, or None where it is not installed."""
    for path in KNOWN_PATHS:
        if os.path.exists(path):
            return path
    return ctypes.util.find_library(LIBRARY)


def preloaded_allocator(preload: str) -> str | None:
    """The malloc family that LD_PRELOAD's value already names, or None. Only a malloc library counts:
    preloaded in front of one, tcmalloc would serve every allocation in its place (the first library
    preloaded wins), overriding the user's choice; any other library (a profiler, an I/O tracer that a
    cluster preloads) leaves malloc to glibc, and tcmalloc goes in front of it as where nothing is preloaded."""
    return next((family for family in map(allocator_of, _entries(preload)) if family), None)


def preload_tcmalloc(env: dict | None = None, execve=os.execve) -> None:
    """Start this process again with tcmalloc preloaded, unless LD_PRELOAD names a malloc library
    already (tcmalloc or the user's own), tcmalloc is not installed, or DISTRL_MALLOC=system. Call
    before importing torch (the first run's imports are thrown away)."""
    env = os.environ if env is None else env
    preloaded = env.get("LD_PRELOAD", "")
    if env.get(OPT_OUT) == "system" or preloaded_allocator(preloaded):
        return
    library = tcmalloc_library()
    if library is None:
        return
    new_env = dict(env, LD_PRELOAD=":".join(p for p in (library, preloaded) if p))
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], new_env)


def _entries(preload: str) -> list[str]:
    return [p for p in preload.replace(" ", ":").split(":") if p]


def without_tcmalloc(preload: str) -> str:
    """LD_PRELOAD's value with every tcmalloc entry taken out (the user's other libraries kept)."""
    return ":".join(p for p in _entries(preload) if LIBRARY not in p)


@contextlib.contextmanager
def submitting_without_tcmalloc(env=None):
    """While a job is submitted: the environment that sbatch exports to it without tcmalloc in
    LD_PRELOAD (restored after), so that the job's node, not this host, decides: job_preload_line."""
    env = os.environ if env is None else env
    before = env.get("LD_PRELOAD")
    if before is not None:
        rest = without_tcmalloc(before)
        if rest:
            env["LD_PRELOAD"] = rest
        else:
            del env["LD_PRELOAD"]
    try:
        yield
    finally:
        if before is not None:
            env["LD_PRELOAD"] = before


def job_preload_line(env=None) -> str:
    """A line of a job's shell script that preloads the first tcmalloc its node has: the one this
    host preloads, else Debian's paths; nothing on a node without one, where LD_PRELOAD already
    names a malloc library (preloaded_allocator's rule, by the same names), or with
    DISTRL_MALLOC=system (read on the node: sbatch exports the environment)."""
    env = os.environ if env is None else env
    ours = [p for p in _entries(env.get("LD_PRELOAD", "")) if LIBRARY in p and p.startswith("/")]
    paths = " ".join(shlex.quote(p) for p in dict.fromkeys([*ours, *KNOWN_PATHS]))
    mallocs = "|".join(f"*{family}*" for family in FAMILIES)
    return (f'if [ "${{{OPT_OUT}:-}}" != system ]; then case "${{LD_PRELOAD:-}}" in {mallocs}) ;; *) '
            f'for f in {paths}; do if [ -e "$f" ]; then export LD_PRELOAD="$f${{LD_PRELOAD:+:$LD_PRELOAD}}"; '
            'break; fi; done ;; esac; fi')
