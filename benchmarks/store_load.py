"""The load the nodes' coordination puts on a world's store, at 8, 32 and 64 ranks.

    cd CHECKOUT && python /path/to/benchmarks/store_load.py [--ranks 8 32 64] [--seconds 20]

Runs from the current directory's checkout (its `sync` package), so the same script measures
two commits side by side. For each rank count it starts that many local ranks (spawned processes,
sync.dist_peers.DistPeers in a fixed world over gloo on 127.0.0.1, rank 0 hosting the store, as a
generation's store keeper would) and runs iterations shaped like a straggler-handling node's:
every rank "collects" for a while (a quarter of the ranks longer than the others: SCENARIOS),
polling the ready counter as nodes/sampling/batcher.py does (every 2 ms, through
`others_ready`) until its batch is full (`mark_ready`) or enough others are ready; then a small
all-reduce (`all_sum`, whose wait looks at the heartbeats once a second); the heartbeat threads
beat meanwhile. Every store call of the three paths (ready counter, heartbeat, liveness looks) is
counted and timed by a proxy around the store clients.

Prints, per rank count: store calls per second over all ranks (and by path), the heaviest rank's
time inside store calls per iteration (main thread: ready counter + looks), and iterations per
second. On a 2-core machine 64 ranks share 2 cores: the iteration rate is the machine's, the call
counts are the code's.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time

SCENARIOS = {  # a fast rank's collection, a slow one's (every 4th rank), sync.ready_frac
    # the default straggler handling: a slow rank trains on what it has once half the ranks are ready
    "default": (0.06, 0.18, 0.5),
    # everyone waits for the slowest (ready_frac=1): slow ranks poll the counter for a second, the
    # others wait in the all-reduce long enough to look at the heartbeats
    "stragglers": (0.25, 1.25, 1.0),
}


class Counting:
    """A store client that counts and times the calls made through it."""

    def __init__(self, inner, tally: dict, path: str):
        self._inner, self._tally, self._path = inner, tally, path

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kw):
            t = time.perf_counter()
            try:
                return attr(*args, **kw)
            finally:
                row = self._tally.setdefault(self._path, [0, 0.0])
                row[0] += 1
                row[1] += time.perf_counter() - t
        return call


def _rank(rank: int, size: int, port: int, seconds: float, root: str, out: str, scenario: str) -> None:
    sys.path.insert(0, root)
    import torch
    from omegaconf import OmegaConf

    from nodes.config.schema import Config
    from sync.dist_peers import DistPeers
    from sync.world import World

    fast, slow, ready_frac = SCENARIOS[scenario]
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config),
                                              {"sync": {"timeout_s": 120, "ready_frac": ready_frac}}))
    peers = DistPeers(World(rank, size, 0, "127.0.0.1", port, "env"), cfg.sync)
    tally: dict = {}
    hb_tally: dict = {}
    peers.keys = Counting(peers.keys, tally, "ready")
    peers.liveness._conn = Counting(peers.liveness._conn, tally, "looks")
    peers._hb._store = Counting(peers._hb._store, hb_tally, "heartbeat")
    collect = slow if rank % 4 == 3 else fast
    flag = torch.zeros(1)
    peers.all_sum(flag)  # everyone is here: start together
    start, tick, per_iter = time.monotonic(), 0, []
    while True:
        before = sum(v[1] for v in tally.values())
        began = time.monotonic()
        while True:
            if time.monotonic() - began >= collect:
                peers.mark_ready(tick)
                break
            if peers.others_ready(tick):
                break
            time.sleep(0.002)
        flag.fill_(1.0 if time.monotonic() - start >= seconds else 0.0)
        peers.all_sum(flag)  # also the vote to end: every rank stops after the same iteration
        per_iter.append(sum(v[1] for v in tally.values()) - before)
        tick += 1
        if flag.item() > 0:
            break
    elapsed = time.monotonic() - start
    peers.close()
    tally.update(hb_tally)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"tally": tally, "elapsed": elapsed, "iterations": tick,
                   "store_s_per_iter": sum(per_iter) / max(1, len(per_iter))}, f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(size: int, seconds: float, scenario: str) -> dict:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as out:
        port = free_port()
        procs = [ctx.Process(target=_rank, args=(r, size, port, seconds, os.getcwd(), out, scenario),
                             daemon=True)
                 for r in range(size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(seconds + 600)
        bad = [r for r, p in enumerate(procs) if p.exitcode != 0]
        for p in procs:
            if p.is_alive():
                p.kill()
        if bad:
            raise SystemExit(f"{size} ranks: ranks {bad[:8]} failed")
        rows = []
        for r in range(size):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                rows.append(json.load(f))
    elapsed = max(r["elapsed"] for r in rows)
    paths = {}
    for r in rows:
        for path, (n, _) in r["tally"].items():
            paths[path] = paths.get(path, 0) + n
    return {"ranks": size, "calls_per_s": sum(paths.values()) / elapsed,
            "by_path": {k: v / elapsed for k, v in sorted(paths.items())},
            "heaviest_store_ms_per_iter": 1000 * max(r["store_s_per_iter"] for r in rows),
            "iterations_per_s": rows[0]["iterations"] / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--scenario", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    args = ap.parse_args()
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"checkout {os.getcwd()} at {commit}, {os.cpu_count()} cores, {args.seconds:g} s per rank count")
    print(f"{'scenario':>10} {'ranks':>5} {'calls/s':>9} {'ready/s':>9} {'looks/s':>9} {'beats/s':>8} "
          f"{'store ms/iter':>14} {'iter/s':>7}")
    for scenario in args.scenario:
        for size in args.ranks:
            m = measure(size, args.seconds, scenario)
            b = m["by_path"]
            print(f"{scenario:>10} {size:>5} {m['calls_per_s']:>9,.0f} {b.get('ready', 0):>9,.0f} "
                  f"{b.get('looks', 0):>9,.0f} {b.get('heartbeat', 0):>8,.0f} "
                  f"{m['heaviest_store_ms_per_iter']:>14.2f} {m['iterations_per_s']:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
