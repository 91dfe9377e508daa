"""Emulated hosts on this machine (`launcher=hosts`): each node in a network namespace of its own.

`nodes=N launcher=hosts launcher.link=1gbit` runs the N nodes of launcher=local, but node i runs in
network namespace <prefix>h<i> with one interface, eth0 = 10.213.0.<i+1>/24, joined to the others
by a bridge through a veth pair. Both directions of every host's link are shaped to `launcher.link`
by a token bucket (tc tbf on each end of the pair), so gloo, the TCPStore, the rendezvous and the
heartbeats all cross a link of that bandwidth, as between machines on a switch. Latency is not
added (this kernel has no netem): a veth pair's is the loopback's, tens of microseconds, which is
what the scaling model's fit already holds.

Teardown: the launcher removes the network when the run ends; a guard process
(launch/spawn/hosts_guard.py, in a session of its own) removes it when the launcher dies in any way,
SIGKILL included, and kills whatever still runs in the namespaces. Needs root, `ip`, `tc` and
util-linux's `unshare` (each host's own host name).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from nodes.errors import ConfigError

log = logging.getLogger("launch.spawn.hosts")

GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts_guard.py")
SUBNET = "10.213.0"
IFNAME = "eth0"  # each namespace's one interface (GLOO_SOCKET_IFNAME)
HOSTS_PER_CORE = 4  # each node is a learner, a policy worker and rollout workers: more only thrash
UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")


def parse_rate(text: str) -> float:
    """'100mbit' | '1gbit' | '2.5gbit' | '500kbit' -> bits per second (tc's units, bits)."""
    m = RATE.match(str(text).strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"launcher.link must be a rate such as 100mbit, 1gbit or 10gbit, got '{text}'")
    return float(m.group(1)) * UNITS[m.group(2)]


def check(cfg) -> None:
    """launcher=hosts can start here (ConfigError names what is missing), before anything starts."""
    parse_rate(cfg.launcher.link)
    check_machine(cfg.nodes, "launcher=hosts", "nodes")


def check_machine(count: int, who: str, what: str) -> None:
    """`count` emulated hosts can start on this machine (ConfigError names what is missing)."""
    cores = len(os.sched_getaffinity(0))
    most = min(HOSTS_PER_CORE * cores, 200)
    if not 2 <= count <= most:
        raise ConfigError(f"{who} runs 2 to {most} emulated hosts on this machine's {cores} cores, "
                          f"got {what}={count}")
    if os.geteuid() != 0:
        raise ConfigError(f"{who} makes network namespaces and shapes links: run it as root")
    missing = [c for c in ("ip", "tc", "unshare", "hostname") if shutil.which(c) is None]
    if missing:
        raise ConfigError(f"{who} needs {' and '.join(missing)} (iproute2, util-linux) on the PATH")


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def _shape(dev: str, bits: float, netns: str | None = None) -> None:
    """A token bucket of `bits`/s on dev's egress. Its burst holds a hundredth of a second at the rate, at least
    256 KiB: a veth hands tbf whole GSO segments of up to 64 KiB, and a bucket smaller than a
    segment would drop it."""
    burst = max(256 * 1024, int(bits / 8 / 100))
    cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(bits)}bit",
           "burst", str(burst), "latency", "100ms"]
    _run(*(["ip", "netns", "exec", netns] if netns else []), *cmd)


def free_prefix() -> str:
    """dr<4 hex digits> that no namespace or link of this machine starts with: from this process's
    pid, else the next free one (one process may hold several networks: the tests' Slurm cluster
    runs on one while a test makes another)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for i in range(0xFFFF):
        prefix = f"dr{(os.getpid() + i) % 0xFFFF:04x}"
        if prefix not in names:
            return prefix
    raise RuntimeError("no free name for an emulated network")


@dataclass
class Network:
    """N hosts on a bridge, every link shaped to `bits`/s. Use as a context manager."""

    hosts: int
    bits: float
    prefix: str = field(default_factory=lambda: free_prefix())
    guard: subprocess.Popen | None = None
    subnet: str = SUBNET  # the hosts are <subnet>.1 .. <subnet>.N
    names: list[str] | None = None  # the hosts' names (default: their namespaces' names)
    gateway: bool = False  # this machine on the bridge too, at <subnet>.254 (e.g. a Slurm controller)
    own_name_loopback: bool = False  # each host names itself 127.0.1.1, as Debian's /etc/hosts does

    def namespace(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def name(self, i: int) -> str:
        return self.names[i] if self.names else self.namespace(i)

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    @property
    def gateway_address(self) -> str:
        return f"{self.subnet}.254"

    def __enter__(self) -> Network:
        # the guard first: from here on, whatever happens to us, it removes what we made
        self.guard = subprocess.Popen([sys.executable, GUARD, self.prefix], stdin=subprocess.PIPE,
                                      start_new_session=True, close_fds=True)
        try:
            self._build()
        except BaseException:
            self.__exit__()
            raise
        log.info("emulated hosts: %d namespaces %sh0..%d on bridge %sbr, %s, each link shaped to %s",
                 self.hosts, self.prefix, self.hosts - 1, self.prefix, ", ".join(map(self.address, range(self.hosts))),
                 rate_text(self.bits))
        return self

    def _build(self) -> None:
        # each host's /etc/hosts (`ip netns exec` mounts /etc/netns/<ns>/hosts over it) names every
        # host: c10d looks up its peers' names, and without a name server a lookup fails and warns
        # (c10d's sockets are IPv6: its peers' addresses come v4-mapped, ::ffff:a.b.c.d)
        def line(i: int) -> str:
            names = " ".join(dict.fromkeys((self.name(i), self.namespace(i))))
            return f"{self.address(i)} {names}\n::ffff:{self.address(i)} {names}\n"

        for i in range(self.hosts):
            os.makedirs(f"/etc/netns/{self.namespace(i)}", exist_ok=True)
            with open(f"/etc/netns/{self.namespace(i)}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n::1 localhost\n0.0.0.0 any\n")
                if self.own_name_loopback:  # the peers know its address, the host itself does not
                    f.write(f"127.0.1.1 {self.name(i)}\n")
                f.write("".join(line(j) for j in range(self.hosts) if j != i or not self.own_name_loopback))
        bridge = self.prefix + "br"
        _run("ip", "link", "add", bridge, "type", "bridge")
        _run("ip", "link", "set", bridge, "up")
        if self.gateway:
            _run("ip", "addr", "add", f"{self.gateway_address}/24", "dev", bridge)
        for i in range(self.hosts):
            ns, veth = self.namespace(i), f"{self.prefix}v{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", IFNAME, "netns", ns)
            _run("ip", "link", "set", veth, "master", bridge)
            _run("ip", "link", "set", veth, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", IFNAME)
            _run("ip", "-n", ns, "link", "set", IFNAME, "up")
            _shape(veth, self.bits)  # bridge -> host i: what host i receives
            _shape(IFNAME, self.bits, ns)  # host i -> bridge: what it sends

    def wrap(self, i: int, cmd: list[str]) -> list[str]:
        """`cmd` run as host i: in its network namespace, and in a UTS namespace whose host name is
        the host's name (every host's /etc/hosts resolves it), as each machine of a cluster has
        a name of its own; torchrun's c10d rendezvous and Slurm name hosts by it. `sh` execs the
        command: its pid is the command's."""
        return ["ip", "netns", "exec", self.namespace(i), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.name(i), *cmd]

    def env(self, i: int) -> dict[str, str]:
        """What a node on host i needs: the address the others reach it at, gloo's interface."""
        return {"DISTRL_NODE_ADDR": self.address(i), "GLOO_SOCKET_IFNAME": IFNAME}

    def pids(self, i: int) -> list[int]:
        """The processes running in host i's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.namespace(i)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def set_link(self, i: int, up: bool) -> None:
        """Host i's link down (nothing crosses it; its sockets stay open) or up again."""
        _run("ip", "-n", self.namespace(i), "link", "set", IFNAME, "up" if up else "down")

    def sent_bytes(self) -> list[int]:
        """Bytes each host sent through its shaped link so far (tc's count on its eth0)."""
        out = []
        for i in range(self.hosts):
            stats = subprocess.run(["ip", "netns", "exec", self.namespace(i), "tc", "-s", "qdisc", "show", "dev",
                                    IFNAME], capture_output=True, text=True).stdout
            m = re.search(r"Sent (\d+) bytes", stats)
            out.append(int(m.group(1)) if m else 0)
        return out

    def __exit__(self, *exc) -> None:
        if self.guard is None:
            return
        self.guard.stdin.close()  # the guard's EOF: it kills what is left inside and removes it all
        try:
            self.guard.wait(60)
        except subprocess.TimeoutExpired:
            log.error("the network guard did not finish in 60 s: namespaces %sh* may be left", self.prefix)
        self.guard = None


CLONE_NEWNET = 0x40000000  # <sched.h>


def enter(namespace: str) -> None:
    """Move this process's thread into `namespace` (os.setns is Python 3.12's; this is 3.11): for a
    process started on this machine, e.g. a measurement rank, before it makes threads or sockets."""
    import ctypes

    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        if ctypes.CDLL("libc.so.6", use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into network namespace {namespace}")
    finally:
        os.close(fd)
    os.environ["GLOO_SOCKET_IFNAME"] = IFNAME


def rate_text(bits: float) -> str:
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g} {unit}/s"
    return f"{bits:g} bit/s"
