"""The load the nodes' coordination puts on a world's store, at 8, 32 and 64 ranks.

    cd CHECKOUT && python /path/to/benchmarks/store_load.py [--ranks 8 32 64] [--seconds 20]

Runs from the current directory's checkout (its `sync` package), so the same script measures
two commits side by side. For each rank count it starts that many local ranks (spawned processes;
rank 0 hosts the TCPStore, as a generation's store keeper does) with the store traffic of a
node and none of its training: the real heartbeat thread (sync.liveness.Heartbeat), the real
liveness looks (Liveness.stale, once a second while waiting, as DistPeers._wait looks during a
collective), and DistPeers' own mark_ready/others_ready on the ready counter. Iterations are shaped
like a straggler-handling node's: every rank "collects" for a while (a quarter of the ranks longer
than the others: SCENARIOS), polling the ready counter as nodes/sampling/batcher.py does (every
2 ms) until its batch is full or enough others are ready, then waits for every rank (a shared
counter standing in for the gradient all-reduce: gloo's full mesh of 64 ranks does not form on 2
cores). Every store call of the three paths is counted and timed by a proxy around the clients.

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


def _rank(rank: int, size: int, port: int, seconds: float, root: str, out: str, scenario: str,  # noqa: C901
          imported, arrived, stop) -> None:
    sys.path.insert(0, root)
    import math
    import types
    from datetime import timedelta

    import torch.distributed as dist

    from sync import dist_peers, liveness

    # every rank has imported torch before any connects: on 2 cores, 64 imports at once starve the
    # store and the heartbeats (on a cluster each rank has a machine of its own)
    fast, slow, ready_frac = SCENARIOS[scenario]

    def connect():
        return dist.TCPStore("127.0.0.1", port, size, is_master=rank == 0, wait_for_workers=False,
                             timeout=timedelta(seconds=120))

    # the store is up before anyone connects, as a store keeper is before its address is published;
    # the ranks connect 8 at a time (the heartbeat's client waits 10 s at most: one stall per wave)
    store = connect() if rank == 0 else None
    # on this VM every ~25th TCPStore connection takes 5.0 s (torch's client, either server backend;
    # plain sockets do not), which a look's 5 s client would not survive while 64 ranks connect
    liveness.STORE_CLIENT_S = 60.0
    imported.wait()
    for wave in range(math.ceil(size / 8)):
        if rank // 8 == wave:
            store = store or connect()
            beat = liveness.Heartbeat("127.0.0.1", port, rank, size)
            look = liveness.Liveness("127.0.0.1", port, rank, size).connect()
        imported.wait()
    tally: dict = {}
    # the rank's side of DistPeers' ready counter, run by DistPeers' own methods (of the checkout)
    peer = types.SimpleNamespace(
        rank=rank, world_size=size, keys=Counting(dist.PrefixStore(liveness.PREFIX, store), tally, "ready"),
        _ready_needed=max(1, math.ceil(ready_frac * size)), _last_poll=0.0, _last_ready=False, _last_version=None,
        _guard=lambda what, fn, *args: fn(*args))
    if hasattr(dist_peers, "READY_POLL_MAX_S"):  # the gap DistPeers._connect sets (since 2026-11-29)
        peer._poll_gap = min(dist_peers.READY_POLL_S * math.ceil(size / 8), dist_peers.READY_POLL_MAX_S)
    beat._store = Counting(beat._store, tally, "heartbeat")
    look._conn = Counting(look._conn, tally, "looks")
    collect = slow if rank % 4 == 3 else fast
    start, tick, per_iter = time.monotonic(), 0, []
    while True:
        before = sum(v[1] for k, v in tally.items() if k != "heartbeat")
        began = time.monotonic()
        while True:
            if time.monotonic() - began >= collect:
                dist_peers.DistPeers.mark_ready(peer, tick)
                break
            if dist_peers.DistPeers.others_ready(peer, tick):
                break
            time.sleep(0.002)
        # the gradient all-reduce: wait for every rank, looking at the heartbeats once a second as
        # DistPeers._wait does (the wait itself is a shared counter here, not gloo: no store traffic)
        if rank == 0 and time.monotonic() - start >= seconds:
            stop.value = 1
        with arrived.get_lock():
            arrived.value += 1
        next_look = time.monotonic() + liveness.HEARTBEAT_S
        while arrived.value < size * (tick + 1):
            if time.monotonic() >= next_look:
                next_look += liveness.HEARTBEAT_S
                look.stale()
            time.sleep(0.001)
        per_iter.append(sum(v[1] for k, v in tally.items() if k != "heartbeat") - before)
        tick += 1
        if stop.value:
            break
    elapsed = time.monotonic() - start
    beat.stop(15)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"tally": tally, "elapsed": elapsed, "iterations": tick,
                   "store_s_per_iter": sum(per_iter) / max(1, len(per_iter))}, f)
    imported.wait()  # rank 0 hosts the store: it leaves last


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(size: int, seconds: float, scenario: str) -> dict:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as out:
        port, imported, arrived, stop = free_port(), ctx.Barrier(size), ctx.Value("q", 0), ctx.Value("b", 0)
        procs = [ctx.Process(target=_rank, daemon=True,
                             args=(r, size, port, seconds, os.getcwd(), out, scenario, imported, arrived, stop))
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
