"""Liveness: which peers are gone, judged on this host's clock alone.

Every rank's heartbeat thread (`Heartbeat`, below) writes `hb/<rank>` in its world's store every
HEARTBEAT_S seconds, a value that changes on every beat (a counter; never a time: hosts' clocks
are never compared, so clock skew between hosts names no one). A rank is lost when the value this
host reads for it has not changed for STALE_BEATS x HEARTBEAT_S seconds of this host's
time.monotonic(). Staleness needs two looks that far apart: the first look only records the beat.
A store that no longer takes connections (or closes one) names its host, rank 0; a look that times
out on a store that still takes connections (a busy store) names no one. A look costs two store calls (check,
multi_get) whatever the world's size.

One `Liveness` per world (a store, a rank, a size) serves every path that names a peer lost: the
quick look during a wait (`stale`), the polled look after a failure or from the watchdog (`lost`);
they share what was seen, so a beat seen by one counts for the other.

The thread that formed the world looks through a connection made then (`connect`): one made
after a loss could race the store's end. When rank 0 dies, gloo's error reaches the others
at once and its store keeper ends a moment later (sync.store_keeper); a look in between would
find the store's port still open, then make a client whose connect torch retries for seconds once
the store is gone, so the survivor would notice late, and the first could form a world
alone (tests/test_liveness.py reproduces the race). A call on an open connection to a store that
ended fails at once.
"""
from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from datetime import timedelta

import torch.distributed as dist

HEARTBEAT_S = 1.0
STALE_BEATS = 2.5  # a heartbeat unchanged for this many periods: the rank is gone
PREFIX = "distrl/"  # our keys apart from the process group's
POLL_S = 0.5  # between two looks of `lost`
STORE_CLIENT_S = 5.0  # a look's store client: the longest a call to a live store may take


def beat_key(rank: int) -> str:
    """The store key (under PREFIX) that rank `rank` beats."""
    return f"hb/{rank}"


class Liveness:
    """The one rule that names a peer lost (see the module docstring). Thread-safe: the main
    thread's looks and the watchdog's may overlap; each uses its own store connection."""

    def __init__(self, addr: str, port: int, rank: int, world_size: int,
                 stale_s: float = STALE_BEATS * HEARTBEAT_S):
        self.addr, self.port = addr, port
        self.rank, self.world_size = rank, world_size
        self.stale_s = stale_s
        self._seen: dict[int, tuple[bytes | None, float]] = {}  # rank -> (its beat, when first seen here)
        self._lock = threading.Lock()
        self._conn, self._owner = None, threading.get_ident()  # the looks' connection, its thread's

    def connect(self) -> Liveness:
        """Make the owner thread's connection now, while the store is known to be up (when the
        world forms); else it is made at the first look."""
        self._conn = self._client()
        return self

    def _client(self):
        """A new client; StoreUnreached when it could not connect within STORE_CLIENT_S."""
        try:
            return dist.PrefixStore(PREFIX, dist.TCPStore(self.addr, self.port, self.world_size, is_master=False,
                                                          timeout=timedelta(seconds=STORE_CLIENT_S)))
        except dist.DistNetworkError as exc:
            raise StoreUnreached(str(exc)) from exc

    def store_answers(self) -> bool:
        """Whether the store's port still takes connections: a refused one names its host (rank 0)
        lost at once, where a store client would retry for seconds."""
        try:
            with socket.create_connection((self.addr, self.port), timeout=2.0):
                return True
        except OSError:
            return False

    def look(self, store) -> list[int]:
        """One look at every other rank's beat through `store` (a client under PREFIX): the ranks whose
        beat is the one first seen more than stale_s ago. Two store calls whatever the world's size
        (check, then multi_get) once every rank has beaten; a key by key look until then (get() and
        multi_get() would wait for a missing key). Raises what the store raises."""
        others = [r for r in range(self.world_size) if r != self.rank]
        keys = [beat_key(r) for r in others]
        if store.check(keys):
            beats = dict(zip(others, store.multi_get(keys)))
        else:
            beats = {r: store.get(k) if store.check([k]) else None for r, k in zip(others, keys)}
        return self._record(beats, time.monotonic())

    def _record(self, beats: dict[int, bytes | None], now: float) -> list[int]:
        stale = []
        with self._lock:
            for r, beat in beats.items():
                seen = self._seen.get(r)
                if seen is None or seen[0] != beat:
                    self._seen[r] = (beat, now)  # alive: its beat moved (or this is the first look)
                elif now - seen[1] > self.stale_s:
                    stale.append(r)
        return stale

    def _own_conn(self):
        """The owner thread's connection (made at its first look if `connect` was not called); None
        on another thread (the watchdog's: the owner may be inside a call on it)."""
        if threading.get_ident() != self._owner:
            return None
        if self._conn is None:
            self._conn = self._client()
        return self._conn

    def stale(self) -> list[int]:
        """One quick look (during a wait, the owner thread): the stale ranks, [0] if the store is gone.
        A failed look on a store that still takes connections (a timeout on a busy store) names no
        one: the next look decides."""
        if not self.store_answers():  # a store client would retry a dead store for 10 s and more
            return [0]
        try:
            return self.look(self._own_conn() or self._client())
        except Exception as exc:  # noqa: BLE001 - the store's host is gone, or the store was slow to answer
            return self._failed_look(exc)

    def _failed_look(self, exc: Exception) -> list[int]:
        """After a look raised: [] for a timeout of a store that still takes connections (a busy
        store: nobody is named for it; the owner's connection is made again at its next look, as
        the one that timed out may hold a late answer); else [0], the store's host is gone (a
        connection closed or refused: the store ended, perhaps just after its port answered).
        `timed_out` tells a timeout by the error's type, not its text."""
        if timed_out(exc) and self.store_answers():
            if threading.get_ident() == self._owner:
                self._conn = None
            return []
        return [0]

    def lost(self, wait_s: float) -> list[int]:
        """Look every POLL_S until some rank is stale or wait_s has passed; returns the stale ranks
        ([] if none by then), [0] if the store is gone. A rank that stopped beating before the call
        is named within stale_s + POLL_S (less if an earlier look saw its last beat), so wait_s
        above that answers for a dead rank; the call returns within wait_s plus one look."""
        if not self.store_answers():
            return [0]
        deadline = time.monotonic() + wait_s
        store = None
        while True:
            try:
                store = store or self._own_conn() or self._client()  # another thread: the owner's may be in a call
                # a store that dies now raises here: its host is named below, not everyone
                lost = self.look(store)
            except Exception as exc:  # noqa: BLE001 - the store's host is gone, or the store was slow to answer
                store, lost = None, self._failed_look(exc)
                if lost:
                    return lost
            if lost or time.monotonic() + POLL_S > deadline:
                return lost
            time.sleep(POLL_S)


class StoreUnreached(dist.DistNetworkError):
    """A new store client could not connect within STORE_CLIENT_S (torch retries a refused or
    unanswered connect until its timeout, then raises DistNetworkError; still one, for callers
    that catch it)."""


def timed_out(exc: BaseException) -> bool:
    """Whether a failed look timed out, by the error's type: torch raises DistStoreError when a
    store call's wait for its answer runs out (its own elastic barrier reads the error so), and a
    client that could not connect in time is StoreUnreached. DistNetworkError on a connection
    made before (closed, a broken pipe) is the store's end; any other error is no timeout either,
    whatever its message says."""
    return isinstance(exc, (dist.DistStoreError, StoreUnreached))


class Heartbeat:
    """The writer side of the rule: a thread that writes this rank's beat (a counter) in its world's
    store every HEARTBEAT_S, over a connection of its own; `each_beat` (elastic rank 0's look for a
    node waiting to join) runs after every beat, its errors ignored."""
    name = "heartbeat"

    def __init__(self, addr: str, port: int, rank: int, world_size: int, each_beat=None):
        self._store = dist.PrefixStore(PREFIX, dist.TCPStore(addr, port, world_size, is_master=False,
                                                             timeout=timedelta(seconds=10)))
        self._rank, self._each_beat = rank, each_beat
        self._beats = itertools.count(1)
        # the first beat before the world is used: the others' looks then find every rank's key
        self._store.set(beat_key(rank), str(next(self._beats)))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if self._each_beat is not None:
                with contextlib.suppress(Exception):
                    self._each_beat()
            try:
                self._store.set(beat_key(self._rank), str(next(self._beats)))
            except Exception:  # noqa: BLE001 - the store host is gone; the main thread will say so
                return

    def stop(self, wait_s: float) -> bool:
        """Stop beating; False if the thread is still in a store call after wait_s."""
        self._stop.set()
        self._thread.join(wait_s)
        return not self._thread.is_alive()
