"""How much memory a node holds: all of its processes (the main process and every descendant:
policy and rollout workers, the janitor, VizDoom's engine processes), read from /proc.

Resident memory is summed as PSS (proportional set size: a page shared by n processes counts
1/n in each), so the shared trajectory buffers count once for the node, as they do in the
machine's RAM; the plain RSS sum, which counts them once per process that maps them, is
reported beside it. `/dev/shm` use is the filesystem's own count, which includes segments whose
names were unlinked (torch's shared tensors) and VizDoom's.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodes.janitor import descendants


def process_memory(pid: int) -> tuple[int, int]:
    """(rss, pss) bytes of one process; (0, 0) when it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


def dev_shm_used() -> int:
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@dataclass
class Sample:
    t: float  # seconds since the watch started
    pss: int  # bytes, summed over the node's processes
    rss: int
    processes: int
    dev_shm: int  # bytes used in /dev/shm (the whole machine's)


def sample(root: int, t0: float) -> Sample:
    pids = descendants(root)
    rss = pss = 0
    for pid in pids:
        r, p = process_memory(pid)
        rss, pss = rss + r, pss + p
    return Sample(time.time() - t0, pss, rss, len(pids), dev_shm_used())


@dataclass
class MemoryWatch:
    """Samples the node's memory every `every_s` on a thread, from `start()` to `stop()`;
    `on_sample` (if given) sees each sample as it is taken."""

    root: int = field(default_factory=os.getpid)
    every_s: float = 1.0
    on_sample: Callable[[Sample], object] | None = None
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self.t0 = time.time()

    def start(self) -> MemoryWatch:
        self.t0 = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.samples.append(sample(self.root, self.t0))
            if self.on_sample is not None:
                self.on_sample(self.samples[-1])
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, since_s: float = 0.0) -> Sample:
        """The sample with the most PSS at or after `since_s`."""
        return max((s for s in self.samples if s.t >= since_s), key=lambda s: s.pss)
