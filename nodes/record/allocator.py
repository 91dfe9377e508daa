"""Which malloc a process runs on, told by its library's file name: summary.json's `allocator`, and
the allocator a user preloaded, which the entry points leave alone (launch/process/allocator.py).

Light on purpose (no torch): the entry points import it before they start again with tcmalloc.
"""
from __future__ import annotations

import os

# malloc replacements by the word their library files carry (libtcmalloc_minimal.so.4, libjemalloc.so.2,
# libmimalloc.so.2, libtbbmalloc_proxy.so.2, libhoard.so): each serves every allocation of a process it
# is preloaded in. TBB's plain libtbbmalloc is not one (a library that TBB's users call), nor
# glibc's libc_malloc_debug (glibc's malloc with hooks), nor abseil's libabsl_malloc_internal.
FAMILIES = ("tcmalloc", "jemalloc", "mimalloc", "tbbmalloc_proxy", "snmalloc", "rpmalloc", "hoard")


def allocator_of(library: str) -> str | None:
    """The malloc family of a library (a path or a soname: 'jemalloc' for libjemalloc.so.2), or None
    for a library that does not replace malloc."""
    name = os.path.basename(library)
    return next((family for family in FAMILIES if family in name), None)


def allocator() -> str:
    """The malloc family this process has mapped (the first in its address space), else 'system'
    (glibc's malloc)."""
    try:
        with open("/proc/self/maps") as f:
            paths = [parts[5] for parts in (line.split(maxsplit=5) for line in f) if len(parts) == 6]
    except OSError:
        return "system"
    return next((family for family in map(allocator_of, paths) if family), "system")
