"""The local spawner: `nodes=N launcher=local` runs N full nodes on this machine over gloo.

Each node is a `python -m launch.node RUN_DIR` process with RANK/WORLD_SIZE/MASTER_ADDR=127.0.0.1/
MASTER_PORT set; `sampler.*` describes each node's layout. Ctrl-C / SIGTERM are forwarded to every
rank (they stop together at the end of an iteration). The exit code is the first non-zero one.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time

log = logging.getLogger("launch.local")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_nodes(run_dir: str, n: int, port: int = 0, grace_s: float = 330.0, elastic: bool = False) -> int:
    """Run N ranks to the end. Once one fails, the others get grace_s (their collective timeout
    plus a margin) to notice and stop on their own; a rank still running then (e.g. frozen) is
    terminated, then killed. Elastic: a failed rank leaves the others running (they re-form the
    world without it), and the grace starts when one finishes; the exit code is 0 when any rank
    finished, else the first a rank returned by itself (75: below sync.min_nodes)."""
    port = port or free_port()
    procs = []
    if elastic:
        from sync.rendezvous import reset
        reset(run_dir)  # a new launch of the run: the last launch's generations are forgotten
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DISTRL_NODE_ADDR="127.0.0.1")
        for key in [k for k in env if k.startswith("SLURM_")]:
            del env[key]  # the spawned world is ours, not a Slurm step's
        procs.append(subprocess.Popen([sys.executable, "-m", "launch.node", run_dir], env=env))
    log.info("started %d nodes on 127.0.0.1:%d (pids %s)", n, port, " ".join(str(p.pid) for p in procs))

    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes, deadline = {}, None
        while len(codes) < n:
            for rank, p in enumerate(procs):
                if rank not in codes and p.poll() is not None:
                    codes[rank] = p.returncode
                    if p.returncode != 0:
                        log.error("node rank %d exited with code %d", rank, p.returncode)
                    if p.returncode != 0 and not elastic or p.returncode == 0 and elastic:
                        # fixed world: the others cannot go on; elastic: the run is over (others finish too)
                        deadline = deadline or time.time() + grace_s
            if deadline and time.time() > deadline:
                for rank, p in enumerate(procs):
                    if rank not in codes:
                        log.error("node rank %d still running %.0f s after a peer failed: terminating it",
                                  rank, grace_s)
                        p.terminate()
                        try:
                            p.wait(10)
                        except subprocess.TimeoutExpired:
                            p.kill()
                            p.wait()
                        codes[rank] = p.returncode
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    bad = [codes[r] for r in range(n) if codes[r] != 0]
    if elastic and len(bad) < n:
        return 0
    if elastic and bad:  # the code of a rank that ended on its own (not killed) tells how the run ended
        return next((c for c in bad if c > 0), bad[0])
    return bad[0] if bad else 0
