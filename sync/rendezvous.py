"""Elastic membership: who is in the run's world now (sync.elastic=true).

The run's rendezvous is a `torch.distributed.FileStore` in the run directory
(`<run_dir>/elastic/store`), not a store hosted by a rank: the run directory is already the run's
shared state (every node reads its config there and the writer checkpoints there, so on a cluster
it is on a shared filesystem), and a file outlives any node, rank 0 included. torch's elastic
rendezvous was the other candidate: its c10d backend keeps the store in the first agent's
process (lost with that node), and its etcd backend needs an etcd service beside the cluster.
The FileStore is only used at membership changes (and polled once a second for joiners); the
traffic of a generation (the process group's set-up, heartbeats, ready counters) goes through a
TCPStore hosted by a small process the generation's lowest node forks from its fork server
(`store_keeper`), so freezing that node's trainer (SIGSTOP) does not freeze the store, and killing
it does (its store keeper dies with it, and the survivors see the store gone).

Keys (all in the FileStore): `launch` names the run's current launch (sync.launches: a relaunch
under srun, torchrun or our spawners is a new one, and resumes from the checkpoint); every other key
is that launch's, under `launch/<key>/`, so a relaunch never reads a past launch's generations or
its `over` mark. A node that joins by hand takes the current launch.
    ids               counter: nodes started later take ids nodes, nodes+1, ...
    gen               the last generation formed (absent before the first)
    round/<g>         the arrivals for generation g: "id:lost.lost,id:...", then, once closed, "|" and
                      the members chosen ("|0.1.3")
    gen/<g>/store     "host:port" of generation g's TCPStore, set by its lowest node
    over              how the run ended, set by its last writer (a node that comes later has nothing to join)

A generation is formed by a round: every node that wants to be in it appends itself (a survivor of
a loss names the ranks it saw lost); the round closes once every member of the previous
generation not named lost has arrived, or `settle_s` after a node's own arrival, whichever is
first. A node that arrives after the close (or finds itself left out) waits for the next round
and joins then, as a node started later does: nothing else tells a late survivor from a newcomer.
The members are the arrivals (at most max_nodes, the previous members first), ranked by id.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import socket
import time
from dataclasses import dataclass

from nodes.errors import ConfigError, one_line

CLOSED = "|"  # then the members chosen, "|0.1.3"
LAUNCH = "launch"  # the run's current launch (sync.launches)
POLL_S = 0.05


class RunFull(RuntimeError):
    """The run already has sync.max_nodes nodes."""


class RunOver(RuntimeError):
    """The run this node came to join has ended (finished, or stopped below sync.min_nodes)."""


@dataclass(frozen=True)
class Generation:
    number: int
    members: tuple[int, ...]  # node ids, sorted: a node's rank is its index
    store_addr: str
    store_port: int

    def rank_of(self, node: int) -> int:
        return self.members.index(node)


def store_path(run_dir: str) -> str:
    return os.path.join(run_dir, "elastic", "store")


def reset(run_dir: str) -> None:
    """A new launch of the run (launch.train, a Slurm submission): forget the last launch's
    generations. Never called by a node that joins."""
    path = store_path(run_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def host_address() -> str:
    """How the other nodes reach this one: DISTRL_NODE_ADDR when set (the local spawner's
    127.0.0.1), else the host name (a cluster's nodes resolve each other's)."""
    return os.environ.get("DISTRL_NODE_ADDR") or socket.gethostname()


def _parse(arrivals: str) -> tuple[list[tuple[int, set[int]]], tuple[int, ...] | None]:
    """(the arrivals with the ranks each saw lost, the members once the round closed else None)."""
    body, closed, chosen = arrivals.partition(CLOSED)
    out = []
    for item in filter(None, body.split(",")):
        node, _, lost = item.partition(":")
        out.append((int(node), {int(x) for x in lost.split(".") if x}))
    return out, tuple(int(x) for x in chosen.split(".") if x) if closed else None


def current_world(run_dir: str) -> Generation | None:
    """The run's current generation as its rendezvous file says (None before the first one, or
    without the file), read without taking part: what a launcher looks at to tell whether a rank it
    started is still in the world (launch.spawn.local)."""
    path = store_path(run_dir)
    if not os.path.exists(path):
        return None
    import torch.distributed as dist

    files = dist.FileStore(path, -1)
    launch = files.get(LAUNCH).decode() if files.check([LAUNCH]) else ""
    store = dist.PrefixStore(f"launch/{launch}", files) if launch else files

    def get(key: str) -> str | None:
        return store.get(key).decode() if store.check([key]) else None

    number, members = get("gen"), None
    if number is not None:
        members = _parse(get(f"round/{number}") or "")[1]
    address = get(f"gen/{number}/store") if members else None
    if address is None:
        return None
    host, _, port = address.rpartition(":")
    return Generation(int(number), members, host, int(port))


class Rendezvous:
    def __init__(self, run_dir: str, node: int | None, settle_s: float, timeout_s: float,
                 min_nodes: int = 1, max_nodes: int = 0, first_size: int = 0, launch: str | None = None):
        """node: this node's id (None: a node started later takes the next free one); first_size:
        how many nodes the first generation waits for (the launched count); launch: the key of the
        launch this node was started by (sync.launches), None to join the run's current one."""
        self.path = store_path(run_dir)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        import torch.distributed as dist

        files = dist.FileStore(self.path, -1)
        if launch is None:  # a node joining the run in progress
            launch = files.get(LAUNCH).decode() if files.check([LAUNCH]) else ""
        else:  # every rank of the launch writes the same key
            files.set(LAUNCH, launch)
        self.launch = launch
        self.store = dist.PrefixStore(f"launch/{launch}", files) if launch else files
        self.settle_s, self.timeout_s = settle_s, timeout_s
        self.min_nodes, self.max_nodes, self.first_size = min_nodes, max_nodes, first_size
        self.node = node if node is not None else first_size + self.store.add("ids", 1) - 1
        # (generation, process, pipe end): the TCPStores this node hosts, one per generation it led
        self.keepers: list = []

    # ------------------------------------------------------------------ reads
    def _get(self, key: str) -> str | None:
        return self.store.get(key).decode() if self.store.check([key]) else None

    def current(self) -> int:
        """The last generation formed, -1 before the first."""
        value = self._get("gen")
        return -1 if value is None else int(value)

    def members(self, number: int) -> tuple[int, ...]:
        """Generation `number`'s members (empty before the first, or for a round not closed)."""
        return _parse(self._get(f"round/{number}") or "")[1] or () if number >= 0 else ()

    def join_waiting(self, number: int) -> bool:
        """Someone arrived for the round after generation `number` (a join, or a survivor)."""
        return self.store.check([f"round/{number + 1}"])

    # ------------------------------------------------------------------ a round
    def _append(self, key: str, item: str) -> bool:
        """Append to a round's arrivals; False when the round already closed."""
        while True:
            old = self._get(key) or ""
            if CLOSED in old:
                return False
            new = f"{old},{item}" if old else item
            if self.store.compare_set(key, old, new).decode() == new:
                return True

    def _close(self, key: str, number: int) -> tuple[int, ...]:
        """Close a round (if nobody did yet) with its members: the arrivals, at most max_nodes of
        them (the previous generation's members first, then by arrival), ranked by id."""
        while True:
            old = self._get(key) or ""
            arrivals, chosen = _parse(old)
            if chosen is not None:
                return chosen
            previous = set(self.members(number - 1))
            ids = list(dict.fromkeys(node for node, _ in arrivals))
            order = {n: i for i, n in enumerate(ids)}
            ids.sort(key=lambda n: (n not in previous, order[n]))
            chosen = tuple(sorted(ids[: self.max_nodes] if self.max_nodes else ids))
            new = old + CLOSED + ".".join(map(str, chosen))
            if self.store.compare_set(key, old, new).decode() == new:
                return chosen

    def _complete(self, arrivals: list[tuple[int, set[int]]], number: int) -> bool:
        """Every node the round waits for is here: the previous generation's members that nobody
        saw lost (the first generation: first_size nodes)."""
        here = {node for node, _ in arrivals}
        if number == 0:
            return len(here) >= self.first_size
        lost = set().union(*(lost for _, lost in arrivals))
        return (set(self.members(number - 1)) - lost) <= here

    def join(self, lost: list[int] = (), after: int | None = None) -> Generation:
        """Take part in the next round (after generation `after`, default the current one) until
        a generation that includes this node is formed; returns it. A node left out of a round
        (late, or beyond max_nodes) takes part in the next. TimeoutError after timeout_s."""
        deadline = time.monotonic() + self.timeout_s * (2 if after is None else 1)  # the first: see _round
        number = (self.current() if after is None else after) + 1
        current = self.members(number - 1)
        if self.max_nodes and len(current) >= self.max_nodes and self.node not in current:
            raise RunFull(f"the run already has sync.max_nodes={self.max_nodes} nodes")
        while True:
            self._check_over()
            gen = self._round(number, lost, deadline)
            if gen is not None:
                return gen
            number = max(number + 1, self.current() + 1)
            lost = ()

    def _round(self, number: int, lost, deadline: float) -> Generation | None:
        key = f"round/{number}"
        if not self._append(key, f"{self.node}:{'.'.join(map(str, sorted(lost)))}"):
            self._wait_formed(number, deadline)
            return None
        # Only a member of the previous generation closes a round early on its clock (settle_s): a
        # newcomer waits for them (they come at their next iteration), or for timeout_s when the
        # whole previous world is gone; a newcomer closing on its own would split the run in two
        survivor = number > 0 and self.node in self.members(number - 1)
        settle_at = time.monotonic() + (self.settle_s if survivor else self.timeout_s)
        while True:
            arrivals, members = _parse(self._get(key) or "")
            if members is None and (self._complete(arrivals, number) or time.monotonic() >= settle_at):
                members = self._close(key, number)
            if members is not None:
                break
            self._check_over()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no generation formed in {self.timeout_s:g} s")
            time.sleep(POLL_S)
        if self.node not in members:
            if self.max_nodes and len(members) >= self.max_nodes:
                raise RunFull(f"the run already has sync.max_nodes={self.max_nodes} nodes")
            self._wait_formed(number, deadline)
            return None
        return self._store_of(number, members, deadline)

    def _wait_formed(self, number: int, deadline: float) -> None:
        while self.current() < number and time.monotonic() < deadline:
            self._check_over()
            time.sleep(POLL_S)

    def _check_over(self) -> None:
        over = self._get("over")
        if over is not None:
            raise RunOver(f"the run is over ({over}): nothing to join")

    def mark_over(self, outcome: str) -> None:
        """The run ended for good: nodes that come later leave at once (RunOver)."""
        self.store.set("over", outcome)

    def _store_of(self, number: int, members: tuple[int, ...], deadline: float) -> Generation:
        """The generation's TCPStore: hosted by its lowest node (a store keeper child), found by the others."""
        key = f"gen/{number}/store"
        if members[0] == self.node:
            addr, port = self._host_store(len(members), number)
            self.store.set(key, f"{addr}:{port}")
            self.store.set("gen", str(number))
        while (value := self._get(key)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"generation {number}'s store was not published in {self.timeout_s:g} s")
            time.sleep(POLL_S)
        addr, _, port = value.rpartition(":")
        return Generation(number, members, addr, int(port))

    def _host_store(self, size: int, number: int) -> tuple[str, int]:
        """Start a store keeper (sync.store_keeper) from this node's fork server; its address."""
        from nodes.sampling.fork_server import start_context
        from sync.store_keeper import serve

        ctx = start_context()
        port_in, port_out = ctx.Pipe(duplex=False)
        node_alive, alive_end = ctx.Pipe(duplex=False)  # the keeper reads, this node holds the other end
        keeper = ctx.Process(target=serve, name="store_keeper", daemon=True,
                             args=(size, self.timeout_s, os.path.dirname(self.path), port_out, node_alive,
                                   host_address(), "DISTRL_NODE_ADDR" if os.environ.get("DISTRL_NODE_ADDR") else ""))
        keeper.start()
        port_out.close()
        node_alive.close()
        # a node that exits without close() ends its keepers first: multiprocessing's own exit
        # handler (registered earlier, so run later) joins its children, a keeper among them
        atexit.register(alive_end.close)
        self.keepers.append((number, keeper, alive_end))
        try:
            if not port_in.poll(self.timeout_s):
                raise RuntimeError(f"no port in {self.timeout_s:g} s")
            port = port_in.recv()
        except (RuntimeError, EOFError, OSError) as exc:
            keeper.kill()
            raise RuntimeError(f"the store keeper did not start ({one_line(exc) or 'it exited'})") from None
        finally:
            port_in.close()
        if isinstance(port, ConfigError):  # it could not listen where the others reach this node: its line
            raise port
        return host_address(), int(port)

    def retire(self, before: int) -> None:
        """Stop the store keepers of generations before `before`: called once this node is in
        generation `before`'s process group, which every member entered through its own store, so
        the old ones serve nobody (a node left out of it finds its old store gone, and joins the next)."""
        self._stop([k for k in self.keepers if k[0] < before])

    def close(self) -> None:
        """Stop the store keepers this node started (they also end when this process does)."""
        self._stop(self.keepers)

    def _stop(self, keepers: list) -> None:
        for item in keepers:
            _, keeper, alive_end = item
            with contextlib.suppress(Exception):
                alive_end.close()
                keeper.join(5)
                if keeper.is_alive():
                    keeper.kill()
        self.keepers = [k for k in self.keepers if k not in keepers]
