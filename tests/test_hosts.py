"""launcher=hosts: nodes on emulated hosts (network namespaces on a bridge, links shaped by tc).
A link carries what its rate allows, two nodes train across their links and agree, and nothing is
left (namespaces, bridge, processes) after a run or after SIGKILL of the launcher."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import FAST_GYM, ROOT, compose, read_until, refusal, start_train, summary, train

from launch.spawn import hosts
from nodes.errors import ConfigError
from nodes.record import checkpoint as ckpt

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

TWO_HOSTS = ["nodes=2", "launcher=hosts", *FAST_GYM, "sampler.num_workers=1"]


def _ours(prefix="dr"):
    """Namespaces and bridges of emulated networks."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    bridges = set(re.findall(rf"({prefix}[0-9a-f]{{4}}br)", links))
    return {n for n in ns if re.fullmatch(rf"{prefix}[0-9a-f]{{4}}h\d+", n)} | bridges


def test_a_link_carries_what_its_rate_allows_and_the_network_goes_away():
    sender = ("import socket, sys; s = socket.create_connection((sys.argv[1], 5999)); s.sendall(b'x' * 2_500_000); "
              "s.close()")
    receiver = ("import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 5999)); s.listen(); c, _ = s.accept()\n"
                "n, t = 0, time.time()\nwhile (b := c.recv(1 << 20)): n += len(b)\nprint(n, time.time() - t)")
    with hosts.Network(2, hosts.parse_rate("20mbit")) as net:
        assert {net.namespace(0), net.namespace(1), net.prefix + "br"} <= _ours()
        # each host has a name of its own, and the interface towards another host is its eth0 (gloo's, unless set)
        towards = "import socket; from sync.listen import interface_towards as t; print(socket.gethostname(), t(%r))"
        seen = subprocess.run(net.wrap(0, [sys.executable, "-c", towards % net.address(1)]), cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.split()
        assert seen == [net.namespace(0), "eth0"], seen
        # where the host's name resolves to 127.0.1.1 on itself (Debian's /etc/hosts) and the store is
        # on this host under that name, the route says lo: gloo takes the one outward interface
        debian = ('echo "127.0.1.1 $(hostname)" > /tmp/h.$$ && mount --bind /tmp/h.$$ /etc/hosts && rm /tmp/h.$$ && '
                  'exec "$0" -c "import os, socket; from sync.listen import choose_gloo_interface as c; '
                  'c(socket.gethostname()); print(socket.gethostbyname(socket.gethostname()), '
                  'os.environ[\'GLOO_SOCKET_IFNAME\'])"')
        seen = subprocess.run(net.wrap(0, ["sh", "-c", debian, sys.executable]), cwd=ROOT, capture_output=True,
                              text=True, env={k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"})
        assert seen.stdout.split() == ["127.0.1.1", "eth0"], seen.stdout + seen.stderr
        recv = subprocess.Popen(net.wrap(1, [sys.executable, "-c", receiver]), stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        subprocess.run(net.wrap(0, [sys.executable, "-c", sender, net.address(1)]), check=True, timeout=60)
        got, seconds = recv.communicate(timeout=60)[0].split()
        sent = net.sent_bytes()
    rate = int(got) * 8 / float(seconds)
    # a token bucket is an upper bound a busy machine cannot exceed (its burst lets ~10 % through at once)
    assert int(got) == 2_500_000 and 0.3e6 * 20 < rate < 1.15 * 20e6, f"{rate / 1e6:.1f} Mbit/s on a 20 Mbit/s link"
    assert sent[0] >= 2_500_000 > sent[1]  # the sender's link counted the payload, the receiver's its acks
    assert not _ours(net.prefix)


def _run_on_two_hosts(run_dir, *overrides):
    """(summary, bytes each host sent, float parameters) of a short run on two emulated hosts."""
    train(run_dir, *TWO_HOSTS, "launcher.link=100mbit", "train.max_env_frames=2048", *overrides, timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["nodes"] == 2 and len(set(s["param_checksums"])) == 1
    log = open(os.path.join(run_dir, "train.log")).read()
    assert "started 2 nodes on 10.213.0.1:" in log
    params = sum(t.numel() for t in ckpt.load(ckpt.latest(run_dir))["model"].values() if t.dtype == torch.float32)
    line = re.search(r"bytes each host sent over its link: ([\d, ]+)", log).group(1)
    return s, [int(b.replace(",", "")) for b in line.split()], params


def test_two_emulated_hosts_train_across_their_links_and_agree_and_bf16_halves_the_bytes(tmp_path):
    s, sent, params = _run_on_two_hosts(str(tmp_path / "fp32"))
    # every gradient all-reduce crossed the shaped links: with 2 ranks each sends a whole gradient
    assert min(sent) >= s["policy_version"] * params * 4 * 0.9, (sent, s["policy_version"], params)
    # sync.grad_dtype=bf16: the gradient goes as bfloat16, 2 bytes a parameter instead of 4
    b, low, _ = _run_on_two_hosts(str(tmp_path / "bf16"), "sync.grad_dtype=bf16")
    per_step, low_per_step = sum(sent) / s["policy_version"], sum(low) / b["policy_version"]
    assert 0.45 < low_per_step / per_step < 0.65, (per_step, low_per_step)
    assert not _ours()


def _shm():
    """What a node can leave in /dev/shm: multiprocessing's named semaphores, VizDoom's segments."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(("sem.mp-", "ViZDoom"))}


def test_sigkill_of_the_launcher_leaves_no_namespace_bridge_node_or_segment(run_dir):
    before = _shm()
    proc = start_train(run_dir, *TWO_HOSTS, "train.max_env_frames=0")
    try:
        m, _ = read_until(proc, r"started 2 nodes on .* \(pids (\d+) (\d+)\)", 60)
        nodes = [int(p) for p in m.group(1, 2)]
        read_until(proc, r"frames [\d,]+ \| fps", 120)
        assert _ours()
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only: its nodes and network are the guard's
        proc.wait(10)
    deadline = time.time() + 30
    while time.time() < deadline and (_ours() or any(os.path.exists(f"/proc/{p}") for p in nodes)):
        time.sleep(0.2)
    assert not _ours(), "namespaces or the bridge outlived a SIGKILLed launcher"
    assert not [p for p in nodes if os.path.exists(f"/proc/{p}")], "nodes outlived a SIGKILLed launcher"
    # the guard lets each node's resource tracker unlink its semaphores (sem.mp-*) before it kills the rest
    assert not _shm() - before, f"/dev/shm entries outlived a SIGKILLed launcher: {_shm() - before}"


@pytest.mark.parametrize("overrides,message", [
    (["launcher.link=fast"], "launcher.link must be a rate such as 100mbit, 1gbit or 10gbit, got 'fast'"),
    (["nodes=1"], "launcher=hosts runs 2 to"),
    (["nodes=999"], "emulated hosts on this machine's"),
])
def test_bad_hosts_input_is_one_line_before_anything_starts(tmp_path, overrides, message):
    assert message in refusal(f"hydra.run.dir={tmp_path}/run", "launcher=hosts", "nodes=2", *FAST_GYM, *overrides)
    assert not _ours() and not os.path.exists(tmp_path / "run" / "config.yaml")


def test_not_root_is_refused(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match="launcher=hosts makes network namespaces and shapes links: run it as root"):
        hosts.check(compose("launcher=hosts", "nodes=2"))
