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

import ipaddress
import socket
from datetime import timedelta

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


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


def serving_store(addr: str, port: int, world_size: int, timeout_s: float, wait_for_workers: bool = True):
    """A TCPStore server for peers that reach it at `addr`:`port` (0: a free port; its `.port`)."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind_address(addr), port))
        sock.listen(512)
        store = dist.TCPStore(addr, sock.getsockname()[1], world_size, is_master=True,
                              timeout=timedelta(seconds=timeout_s), wait_for_workers=wait_for_workers,
                              master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the descriptor now
    return store


def interface_towards(addr: str, port: int = 9) -> str | None:
    """The name of this host's interface whose address it uses to reach `addr` (the kernel's
    route: a UDP socket's connect sends nothing), or None when that cannot be told."""
    import fcntl
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(addr), port))
            source = s.getsockname()[0]
            for _, name in socket.if_nameindex():
                try:  # SIOCGIFADDR: the interface's IPv4 address
                    raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:  # no IPv4 address on it
                    continue
                if socket.inet_ntoa(raw[20:24]) == source:
                    return name
    except OSError:
        return None
    return None


def choose_gloo_interface(store_addr: str) -> None:
    """gloo listens and connects on GLOO_SOCKET_IFNAME's address, else on the address of the host's
    name, which on a host with several interfaces (or a name that resolves to 127.0.1.1) may not be
    the one the other hosts reach. Unless set, it becomes the interface this host reaches the
    world's store through: the network the nodes share."""
    import os

    if not os.environ.get("GLOO_SOCKET_IFNAME"):
        name = interface_towards(store_addr)
        if name is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = name
