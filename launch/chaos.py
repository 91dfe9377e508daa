"""`python -m launch.chaos nodes=3 launcher=hosts [overrides]`: the chaos soak.

A training run of `nodes` elastic nodes on emulated hosts (launch.spawn.hosts: each node in a network
namespace of its own, links shaped to launcher.link), plus one spare host, and for bench.chaos_s
seconds from the moment the world first formed (its rank 0 logged it; a start-up slowed by a busy
machine does not eat into the window) a fault at random times (one every bench.chaos_every_s on
average, `seed` seeds the draw), each kind in turn from a shuffled bag:

- kill: SIGKILL of a node that is not the store's host;
- kill_store: SIGKILL of the node hosting the generation's store (its rank 0, the writer);
- freeze: SIGSTOP of a node's main process (the store's host too: its store lives in a child
  process, sync.store_keeper), SIGCONT FREEZE_S later (its heartbeat goes stale);
- cut: the link of a host that is not the store's set down, up again CUT_S later (nothing crosses);
- join: `python -m launch.node RUN_DIR` on a free host (a node joining the run).

`bench.chaos_faults=[kill,join,freeze,kill_store]` injects those kinds in that order instead (then
no more), at the same pace and under the same rules.

Faults hit healthy nodes only: none frozen or cut off now or in the last SETTLE_S, no young
joiner. One that would leave fewer than 2 healthy nodes becomes a join, and one that cannot be
done now (no free host, the store's host not healthy) is skipped. The cut spares the store's
host: a machine whose store nobody can reach stops the world until the watchdog ends it
(docs/multi-node.md, Limits), which is not a fault a run survives. After the window the run
goes on to train.max_env_frames; then the checks (launch.tools.chaos_report): the run finished, the
survivors agree (checksums), the frame counter never went back, the last checkpoint loads, every
node ended with the run or by our SIGKILL, nothing is left running, no namespace, bridge or
leftover /dev/shm entry.

The report (each fault: when, what the world did, how long until it trained again, the frame
counter around it) is printed and written to RUN_DIR/chaos.json. Exit 0 when every check passed,
1 when one failed; bad input is one line and exit 2 before anything starts.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import hydra

from launch.cli.app import check as check_config
from launch.cli.app import hydra_run_dir, resolve
from launch.cli.overrides import check_command
from launch.process.exits import refuse
from launch.process.resolved import discard_pending, write_resolved
from launch.spawn.local import free_port, node_command
from launch.tools import chaos_report
from nodes.errors import ConfigError, need
from sync.launches import new_launch

log = logging.getLogger("launch.chaos")

FAULTS = ("kill", "kill_store", "freeze", "cut", "join")
FREEZE_S = 10.0  # well past the 2.5 s after which a silent heartbeat names a node lost
CUT_S = 15.0
END_S = 1800.0  # after the fault window, the longest the run may take to reach its frames


def check_chaos(cfg) -> None:
    """What the soak needs beyond launch.cli.app's checks (ConfigError, one line)."""
    need(cfg.launcher.name == "hosts", "launch.chaos runs the nodes on emulated hosts: use launcher=hosts")
    need(cfg.sync.elastic, "launch.chaos kills and adds nodes: it needs sync.elastic=true")
    need(cfg.nodes >= 3, f"launch.chaos needs nodes >= 3 (a fault must leave 2), got nodes={cfg.nodes}")
    need(cfg.sync.min_nodes <= 2, f"launch.chaos leaves as few as 2 nodes: sync.min_nodes must be <= 2, "
                                  f"got {cfg.sync.min_nodes}")
    need(cfg.train.max_env_frames > 0, "launch.chaos ends with a finished run: set train.max_env_frames")
    need(cfg.bench.chaos_s > 0 and cfg.bench.chaos_every_s > 0,
         "bench.chaos_s and bench.chaos_every_s must be > 0")
    unknown = [k for k in cfg.bench.chaos_faults if k not in FAULTS]
    need(not unknown, f"bench.chaos_faults: unknown fault {', '.join(map(str, unknown))} (known: {', '.join(FAULTS)})")
    from launch.spawn import hosts
    hosts.check_machine(cfg.nodes + 1, "launch.chaos", "nodes + 1 (a spare host for joins)")


def check(cfg) -> None:
    check_chaos(cfg)
    check_config(cfg)


@dataclass
class Host:
    """One emulated host and the node process running on it (if any)."""

    index: int
    proc: subprocess.Popen | None = None
    node: int | None = None  # the node id (a joiner's is known once it logged it)
    output: str = ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


SETTLE_S = 30.0  # after a freeze or cut is mended, or a join starts: not yet counted in the world


@dataclass
class Fleet:
    """The soak's hosts and nodes: starts, breaks and mends them."""

    run_dir: str
    net: object  # launch.spawn.hosts.Network
    hosts: list[Host] = field(default_factory=list)
    exits: list[dict] = field(default_factory=list)  # every node process that ended: when, code
    mends: list[tuple[float, Host, Callable[[], None]]] = field(default_factory=list)  # (due, host, action)
    settling: dict[int, float] = field(default_factory=dict)  # host -> until when it is not counted
    t0: float = field(default_factory=time.time)

    def start_world(self, n: int) -> None:
        port, master, launch = free_port(), self.net.address(0), new_launch()
        for rank in range(n):
            self._start(self.hosts[rank], (rank, n, master, port), launch)
            self.hosts[rank].node = rank

    def _start(self, host: Host, world, launch: str = "") -> None:
        cmd, env = node_command(self.run_dir, world, self.net, host.index, launch)
        host.output = os.path.join(self.run_dir, "chaos", f"host{host.index}-{len(self.exits)}-{int(self.now())}.out")
        with open(host.output, "w") as out:
            host.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        host.node = None

    def now(self) -> float:
        return time.time() - self.t0

    def live(self) -> list[Host]:
        return [h for h in self.hosts if h.running()]

    def healthy(self) -> list[Host]:
        """Live nodes that are in the world as far as the soak can tell: none frozen or cut off now
        or in the last SETTLE_S (a dropped node takes a while to come back), no joiner that young."""
        return [h for h in self.live() if self.settling.get(h.index, 0.0) <= time.time()]

    def free(self) -> list[Host]:
        """Hosts with no node, no mend pending (a cut link), nothing left in their namespace (a
        killed node's workers gone)."""
        busy = {h.index for _, h, _ in self.mends}
        return [h for h in self.hosts if not h.running() and h.index not in busy and not self.net.pids(h.index)]

    def node_of(self, host: Host) -> int | None:
        if host.node is None:
            host.node = joined_as(host.output)
        return host.node

    def store_host(self) -> Host | None:
        """The live host of the newest generation's rank 0 (its logs say so), if it is live."""
        node = chaos_report.rank0_node(self.run_dir)
        return next((h for h in self.live() if self.node_of(h) == node), None)

    def mend(self, host: Host, after_s: float, action: Callable[[], None]) -> None:
        due = time.time() + after_s
        self.mends.append((due, host, action))
        self.settling[host.index] = due + SETTLE_S

    def mend_due(self) -> None:
        for m in [m for m in self.mends if m[0] <= time.time()]:
            self.mends.remove(m)
            m[2]()

    def reap(self) -> None:
        for h in self.hosts:
            if h.proc is not None and h.proc.poll() is not None:
                self.exits.append(dict(t=round(self.now(), 1), host=h.index, node=self.node_of(h),
                                       code=h.proc.returncode))
                log.info("node %s on host %d exited with code %d", h.node, h.index, h.proc.returncode)
                h.proc = None

    def signal(self, host: Host, signum: int) -> None:
        if host.running():
            host.proc.send_signal(signum)

    def link(self, host: Host, up: bool) -> None:
        self.net.set_link(host.index, up)


@dataclass
class FaultClock:
    """When the next fault is due, in seconds since the world first formed (its rank 0 logged it),
    so that a start-up slowed by a busy machine does not eat into the window."""

    window_s: float
    every_s: float
    rng: random.Random
    formed: float | None = None  # fleet.now() at the world's first formation
    next_at: float = 0.0
    now: float = -1.0

    def __post_init__(self):
        self.next_at = self.rng.uniform(0.5, 1.5) * self.every_s

    def due(self, fleet: Fleet) -> bool:
        if self.formed is None and fleet.store_host() is not None:
            self.formed = fleet.now()
            log.info("the world formed at %.0f s: the fault window starts", self.formed)
        self.now = fleet.now() - self.formed if self.formed is not None else -1.0
        return self.next_at <= self.now < self.window_s and bool(fleet.live())

    def draw_next(self) -> None:
        self.next_at = self.now + self.rng.uniform(0.5, 1.5) * self.every_s

    def overdue(self, fleet: Fleet) -> bool:
        return fleet.now() > (self.formed or 0.0) + self.window_s + END_S


def choose(kind: str, fleet: Fleet, rng: random.Random) -> tuple[str, Host | None]:
    """The fault to inject and its host: `kind` on a healthy node (kill and cut: not the store's
    host), or a join where it would leave fewer than 2 healthy nodes; ("skip", None) when neither
    can be done now."""
    healthy, store = fleet.healthy(), fleet.store_host()
    if kind != "join" and len(healthy) <= 2:
        kind = "join"
    if kind == "join":
        free = fleet.free()
        return ("join", rng.choice(free)) if free else ("skip", None)
    if kind == "kill_store":
        return (kind, store) if store in healthy else ("skip", None)
    targets = healthy if kind == "freeze" else [h for h in healthy if h is not store]
    return (kind, rng.choice(targets)) if targets else ("skip", None)


def inject(kind: str, host: Host, fleet: Fleet) -> dict:
    """Start fault `kind` on `host`; a freeze or cut is mended later (Fleet.mend_due)."""
    record = dict(t=round(fleet.now(), 1), kind=kind, host=host.index, node=fleet.node_of(host), output=host.output)
    if kind in ("kill", "kill_store"):
        fleet.signal(host, signal.SIGKILL)
    elif kind == "freeze":
        fleet.signal(host, signal.SIGSTOP)
        fleet.mend(host, FREEZE_S, lambda: fleet.signal(host, signal.SIGCONT))
    elif kind == "cut":
        fleet.link(host, up=False)
        fleet.mend(host, CUT_S, lambda: fleet.link(host, up=True))
    elif kind == "join":
        fleet._start(host, None)
        fleet.settling[host.index] = time.time() + 2 * SETTLE_S  # starting its workers, then joining
        record.update(node=None, output=host.output)  # its node id is in its output once it joined
    log.info("fault at %.0f s: %s on host %d (node %s)", record["t"], kind, host.index, record["node"])
    return record


def soak(obj) -> dict:
    """The run with its faults, to the end; the report (launch.tools.chaos_report)."""
    from launch.spawn.hosts import Network, parse_rate
    from sync.rendezvous import reset

    b, rng = obj.bench, random.Random(obj.seed)
    os.makedirs(os.path.join(obj.run_dir, "chaos"), exist_ok=True)
    shm_before = set(os.listdir("/dev/shm"))
    reset(obj.run_dir)
    scripted = bool(b.chaos_faults)  # these, in order, and no more
    faults, bag = [], list(reversed(b.chaos_faults))
    with Network(obj.nodes + 1, parse_rate(obj.launcher.link)) as net:
        fleet = Fleet(obj.run_dir, net, [Host(i) for i in range(obj.nodes + 1)])
        fleet.start_world(obj.nodes)
        log.info("chaos soak: %d nodes on hosts 0..%d (host %d spare), faults for %.0f s, one every ~%.0f s",
                 obj.nodes, obj.nodes - 1, obj.nodes, b.chaos_s, b.chaos_every_s)
        clock = FaultClock(b.chaos_s, b.chaos_every_s, rng)
        try:
            while fleet.live() or fleet.mends:
                fleet.reap()
                fleet.mend_due()
                if clock.due(fleet) and (bag or not scripted):
                    bag = bag or rng.sample(FAULTS, len(FAULTS))
                    kind, host = choose(bag.pop(), fleet, rng)
                    if host is not None:
                        faults.append(inject(kind, host, fleet))
                    else:
                        log.info("fault at %.0f s: %s cannot be done now (too few healthy nodes or no free host)",
                                 fleet.now(), kind)
                    clock.draw_next()
                if clock.overdue(fleet):
                    log.error("the run did not finish %.0f s after the fault window: stopping it", END_S)
                    for h in fleet.live():
                        fleet.signal(h, signal.SIGKILL)
                time.sleep(0.5)
        finally:
            for h in fleet.live():  # Ctrl-C or an error of ours: the nodes go with the network
                fleet.signal(h, signal.SIGCONT)
            for _, h, _ in fleet.mends:
                if h.proc is not None:  # a cut link: up again, so that nothing waits on it
                    with contextlib.suppress(Exception):
                        fleet.link(h, up=True)
            fleet.reap()
            left_inside = settled(net, fleet.hosts)
    for f in faults:  # a joiner's node id, now that it logged it
        f["node"] = f["node"] if f["node"] is not None else joined_as(f.pop("output"))
        f.pop("output", None)
    report = chaos_report.build(obj.run_dir, faults, fleet.exits, fleet.t0, obj.train.max_env_frames)
    report["checks"] += chaos_report.leftovers(obj.run_dir, left_inside, net.prefix, shm_before)
    return report


def settled(net, hosts: list[Host], wait_s: float = 15.0) -> dict[int, list[int]]:
    """The processes still in each host's namespace once the nodes' cleaners had `wait_s` (each
    node's janitor ends its workers after the node ended)."""
    deadline = time.time() + wait_s
    while True:
        inside = {h.index: net.pids(h.index) for h in hosts}
        if not any(inside.values()) or time.time() > deadline:
            return inside
        time.sleep(0.5)


def joined_as(output: str | None) -> int | None:
    try:
        with open(output, errors="replace") as f:
            m = re.search(r"node (\d+) is rank \d+ of", f.read())
    except (OSError, TypeError):
        return None
    return int(m.group(1)) if m else None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    try:
        check_chaos(obj)
    except ConfigError as exc:
        discard_pending(obj.run_dir)  # Hydra's record of a launch refused: nothing is left
        refuse(str(exc))
    write_resolved(obj)
    log.info("run directory: %s", obj.run_dir)
    report = soak(obj)
    with open(os.path.join(obj.run_dir, "chaos.json"), "w") as f:
        json.dump(report, f, indent=1)
    chaos_report.print_report(report)
    sys.exit(0 if all(c["ok"] for c in report["checks"]) else 1)


if __name__ == "__main__":
    sys.argv[1:] = check_command(sys.argv[1:], check)  # what Hydra's app reads: 1e6 as 1000000 for an int key
    main()
