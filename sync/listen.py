"""Stores that listen only where their peers reach them.

A TCPStore server made the usual way (`TCPStore(host, port, is_master=True)`) listens on every
interface whatever `host` says. Ours are made on a socket bound here instead (`master_listen_fd`):
on the address the peers are given (DISTRL_NODE_ADDR: 127.0.0.1 for local runs, the emulated host's
address under launcher=hosts; else the host name, which a cluster's hosts resolve to its cluster
address). A name that resolves to a loopback address on this host (Debian's 127.0.1.1 for its own
host name) says nothing about where the other hosts reach it: that store keeps listening on every
interface, as the limitations page says.
"""
from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from datetime import timedelta

from nodes.errors import ConfigError

LOOPBACK_NAMES = ("localhost", "ip6-localhost")
log = logging.getLogger("sync")


def bind_address(addr: str) -> str:
    """The local IPv4 address to listen on for peers that reach this host as `addr` ("0.0.0.0":
    every interface, when that cannot be told)."""
    try:
        ip = ipaddress.ip_address(socket.gethostbyname(addr))
    except (OSError, ValueError):
        return "0.0.0.0"
    if ip.is_loopback and not (addr in LOOPBACK_NAMES or _is_literal(addr)):
        return "0.0.0.0"  # the other hosts resolve this name elsewhere
    return str(ip)


def _is_literal(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr)
        return True
    except ValueError:
        return False


def serving_store(addr: str, port: int, world_size: int, timeout_s: float, wait_for_workers: bool = True,
                  named: str = ""):
    """A TCPStore server for peers that reach it at `addr`:`port` (0: a free port; its `.port`).
    An address that is not this host's is refused in one line (ConfigError, `not_here`) that names
    the variable it came from (`named`; else MASTER_ADDR or DISTRL_NODE_ADDR where one holds it)."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_address(addr), port))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            raise ConfigError(not_here(addr, named)) from None
        sock.listen(512)
        store = dist.TCPStore(addr, sock.getsockname()[1], world_size, is_master=True,
                              timeout=timedelta(seconds=timeout_s), wait_for_workers=wait_for_workers,
                              master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the descriptor now
    return store


def not_here(addr: str, named: str = "") -> str:
    """The one line for a store address that resolves to no address of this host: a NAT's, a
    virtual IP or a Kubernetes Service's reaches the host but cannot be listened on. It names the
    variable that gave the address (MASTER_ADDR: rank 0 of a fixed world; DISTRL_NODE_ADDR, else
    the host name: the node hosting an elastic generation's store)."""
    var = named or next((v for v in ("MASTER_ADDR", "DISTRL_NODE_ADDR") if os.environ.get(v) == addr), None)
    named = f"{addr} ({var})" if var else f"{addr} (this host's name)" if addr == socket.gethostname() else addr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        own = [f"{ip} on {name}" for _, name in socket.if_nameindex() if (ip := _ipv4(s, name))]
    return (f"cannot listen for peers on {named}: it resolves to {socket.gethostbyname(addr)}, no address of this "
            f"host's ({', '.join(own)}); a NAT's, a virtual or a Service's address reaches a host but cannot be "
            f"listened on: set {var or 'DISTRL_NODE_ADDR'} on this host to one of its own")


def _ipv4(sock: socket.socket, name: str) -> str | None:
    """Interface `name`'s IPv4 address (SIOCGIFADDR), None when it has none."""
    import fcntl
    import struct

    try:
        raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def interface_towards(addr: str, port: int = 9) -> str | None:
    """The name of this host's interface whose address it uses to reach `addr` (the kernel's
    route: a UDP socket's connect sends nothing), or None when that cannot be told."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(addr), port))
            source = s.getsockname()[0]
            for _, name in socket.if_nameindex():
                if _ipv4(s, name) == source:
                    return name
    except OSError:
        return None
    return None


def outward_interfaces() -> list[str]:
    """This host's interfaces that are up and have an IPv4 address other than a loopback one."""
    import fcntl
    import struct

    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            addr = _ipv4(s, name)
            if addr is None or ipaddress.ip_address(addr).is_loopback:
                continue
            try:  # SIOCGIFFLAGS: IFF_UP is bit 0
                raw = fcntl.ioctl(s.fileno(), 0x8913, struct.pack("256s", name.encode()[:15]))
                flags = struct.unpack("H", raw[16:18])[0]
            except OSError:
                continue
            if flags & 1:
                out.append(name)
    return out


def _loopback_only(addr: str) -> bool:
    """`addr` names this host to itself alone (a local run), not as the other hosts know it."""
    return addr in LOOPBACK_NAMES or (_is_literal(addr) and ipaddress.ip_address(addr).is_loopback)


def choose_gloo_interface(store_addr: str) -> None:
    """gloo listens and connects on GLOO_SOCKET_IFNAME's address, else on the address of the host's
    name, which on a host with several interfaces (or a name that resolves to 127.0.1.1) may not be
    the one the other hosts reach. Unless set, it becomes the interface this host reaches the
    world's store through: the network the nodes share. Where the store is on this host under a
    name that resolves to a loopback address here, that route says nothing: then the host's one
    outward interface, and where it has several, a warning that asks for GLOO_SOCKET_IFNAME."""
    import os

    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    name = interface_towards(store_addr)
    if name is None:
        return
    outward = outward_interfaces()
    if name not in outward and not _loopback_only(store_addr):
        if len(outward) != 1:
            log.warning("gloo: the store's address %s resolves to a loopback address on this host (%s), and "
                        "the interface the other hosts reach it on is one of %s: set GLOO_SOCKET_IFNAME to it",
                        store_addr, socket.gethostname(), ", ".join(outward) or "none")
            return
        name = outward[0]
    os.environ["GLOO_SOCKET_IFNAME"] = name
    log.info("gloo uses interface %s of host %s: its route to the store at %s", name, socket.gethostname(), store_addr)
