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
the Dockerfile install it: Debian's libtcmalloc-minimal4), where it is already preloaded, or with
DISTRL_MALLOC=system (glibc's malloc, as before).
"""
from __future__ import annotations

import ctypes.util
import os
import sys

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


def preload_tcmalloc(env: dict | None = None, execve=os.execve) -> None:
    """Start this process again with tcmalloc preloaded, unless it is already, is not installed, or
    DISTRL_MALLOC=system. Call before importing torch (the first run's imports are thrown away)."""
    env = os.environ if env is None else env
    preloaded = env.get("LD_PRELOAD", "")
    if env.get(OPT_OUT) == "system" or LIBRARY in preloaded:
        return
    library = tcmalloc_library()
    if library is None:
        return
    new_env = dict(env, LD_PRELOAD=":".join(p for p in (library, preloaded) if p))
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], new_env)
