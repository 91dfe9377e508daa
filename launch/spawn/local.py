"""The local spawner: `nodes=N launcher=local` runs N full nodes on this machine over gloo
(`launcher=hosts`: each on an emulated host of its own, launch.spawn.hosts).

Each node is a `python -m launch.node RUN_DIR` process with RANK/WORLD_SIZE/MASTER_ADDR=127.0.0.1/
MASTER_PORT set; `sampler.*` describes each node's layout. Ctrl-C / SIGTERM are forwarded to every
rank (they stop together at the end of an iteration). The exit code is the first non-zero one.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from launch.process.exits import stop_signal
from launch.spawn.joiners import wait_for_joiners
from nodes.config.schema import Config
from sync.launches import ENV as launch_env
from sync.launches import new_launch
from sync.rendezvous import current_world

log = logging.getLogger("launch.spawn.local")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Once a rank ends, the time the others get to notice and stop on their own: their collective
# timeout (a peer that is gone is seen by then) plus a margin for the final checkpoint.
GRACE_MARGIN_S = 30.0


def grace_s(cfg: Config) -> float:
    return cfg.sync.timeout_s + GRACE_MARGIN_S


def spawn_nodes(cfg: Config) -> int:
    """Run cfg.nodes ranks of the run in cfg.run_dir (its config.yaml already written) to the end.
    Once one fails, the others get grace_s(cfg) to notice and stop on their own; a rank still
    running then (e.g. frozen) is ended (_end_the_rest); so are ranks that all stayed stopped
    (SIGSTOP) for as long. Elastic: a failed rank leaves the others running (they re-form the world
    without it), and the grace starts when one finishes or the run's summary is written; once every
    rank ended, nodes that joined the run may carry it on (launch.spawn.joiners); the exit code is 0
    when the summary says the run finished, else the first a rank returned by itself (75: below
    sync.min_nodes)."""
    elastic, grace = cfg.sync.elastic, grace_s(cfg)
    if elastic:
        from sync.rendezvous import reset
        reset(cfg.run_dir)  # a new launch of the run: the last launch's generations are forgotten
    launched = time.time()

    def over() -> bool:
        return elastic and run_outcome(cfg.run_dir, launched) is not None

    def world():
        return current_world(cfg.run_dir) if elastic else None

    with _network(cfg) as net:
        procs = _start(cfg.run_dir, cfg.nodes, cfg.sync.master_port or free_port(), net)
        with _forwarding_signals(procs) as asked:
            codes = _wait(procs, grace, elastic, over, world)
            if elastic and not over() and not asked:
                wait_for_joiners(cfg, set(range(len(procs))), over, asked)
        if net is not None:
            sent = net.sent_bytes()
            log.info("bytes each host sent over its link: %s", " ".join(f"{b:,}" for b in sent))
    return _exit_code([codes[r] for r in range(len(procs))], elastic, run_outcome(cfg.run_dir, launched))


def _network(cfg: Config):
    """launcher=hosts: the emulated hosts the nodes run on (launch.spawn.hosts); else nothing."""
    if cfg.launcher.name != "hosts":
        return contextlib.nullcontext()
    from launch.spawn.hosts import Network, parse_rate
    return Network(cfg.nodes, parse_rate(cfg.launcher.link))


def _start(run_dir: str, n: int, port: int, net=None) -> list[subprocess.Popen]:
    """Rank r's node process: on this machine's loopback, or as emulated host r of `net`."""
    master = net.address(0) if net is not None else "127.0.0.1"
    procs, launch = [], new_launch()
    for rank in range(n):
        cmd, env = node_command(run_dir, (rank, n, master, port), net, rank, launch)
        procs.append(subprocess.Popen(cmd, env=env))
    log.info("started %d nodes on %s:%d (pids %s)", n, master, port, " ".join(str(p.pid) for p in procs))
    return procs


def node_command(run_dir: str, world: tuple[int, int, str, int] | None, net=None, host: int = 0,
                 launch: str = ""):
    """(argv, environment) of one `python -m launch.node RUN_DIR`: rank `world` = (rank, size,
    master address, port) of a world this launch (key `launch`, sync.launches) forms, or None: a
    node joining the run (elastic); on this machine's loopback, or as emulated host `host` of `net`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TORCHELASTIC_"))  # the spawned world is ours, not a step's
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         launch_env)}
    # on this machine the nodes reach each other on the loopback: their stores and gloo listen there only
    env.update(DISTRL_NODE_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
    if world is not None:
        rank, n, master, port = world
        env.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR=master, MASTER_PORT=str(port))
        env[launch_env] = launch or new_launch()
    cmd = [sys.executable, "-m", "launch.node", run_dir]
    if net is not None:
        env.update(net.env(host))
        cmd = net.wrap(host, cmd)  # `ip netns exec` execs the node: the pid is the node's
    return cmd, env


@contextlib.contextmanager
def _forwarding_signals(procs: list[subprocess.Popen]):
    """Ctrl-C / SIGTERM go to every rank still running: they stop together after an iteration.
    Yields the list of the signals received (the user's requests), in order."""
    asked: list[int] = []

    def forward(signum, frame):
        asked.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asked
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_outcome(run_dir: str, since: float) -> str | None:
    """The outcome in the summary.json the run's writer wrote after `since` (None before): the run
    is over, whoever wrote it (an elastic run may end on a node this launcher did not start: one
    that joined by launch.node)."""
    path = os.path.join(run_dir, "summary.json")
    try:
        if os.path.getmtime(path) < since:
            return None
        with open(path) as f:
            return json.load(f)["outcome"]
    except (OSError, ValueError, KeyError):
        return None


def stopped(p: subprocess.Popen) -> bool:
    """The process is stopped (SIGSTOP, a debugger): it acts on no signal but SIGKILL and SIGCONT."""
    try:
        with open(f"/proc/{p.pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] in "Tt"


def _wait(procs: list[subprocess.Popen], grace: float, elastic: bool, over=lambda: False,
          world=lambda: None) -> dict[int, int]:
    """{rank: exit code} once every rank ended, by itself or ended by _end_the_rest `grace` s after
    the grace started: a rank ended (_collect says which end starts it), `over()` (the run is over:
    its summary is written), or every rank still running is stopped and stays so (it cannot make
    progress; a rank that goes on meanwhile restarts that count). `world()`: the elastic run's
    current generation (sync.rendezvous.current_world), None when unknown."""
    codes: dict[int, int] = {}
    deadline = frozen_since = None
    while len(codes) < len(procs):
        if _collect(procs, codes, elastic) or over():
            deadline = deadline or time.time() + grace
        running = [p for r, p in enumerate(procs) if r not in codes]
        frozen_since = (frozen_since or time.time()) if running and all(map(stopped, running)) else None
        if (deadline and time.time() > deadline) or (frozen_since and time.time() > frozen_since + grace):
            _end_the_rest(procs, codes, grace, world())
        time.sleep(0.2)
    return codes


def _collect(procs: list[subprocess.Popen], codes: dict[int, int], elastic: bool) -> bool:
    """Record the ranks that ended since the last look; True when one of them starts the grace:
    a failure in a fixed world (the others cannot go on), a finish in an elastic one (the run is
    over, the others finish too)."""
    starts = False
    for rank, p in enumerate(procs):
        if rank in codes or p.poll() is None:
            continue
        codes[rank] = p.returncode
        if stop_signal(p.returncode):  # Ctrl-C or SIGTERM, forwarded to every rank: a clean stop
            log.info("node rank %d stopped on %s after its final checkpoint (exit code %d)", rank,
                     stop_signal(p.returncode), p.returncode)
        elif p.returncode != 0:
            log.error("node rank %d exited with code %d", rank, p.returncode)
        starts = starts or (p.returncode == 0) == elastic
    return starts


def _end_the_rest(procs: list[subprocess.Popen], codes: dict[int, int], grace: float, world=None) -> None:
    """End the ranks still running. A rank of an elastic run that the world has dropped (not a member
    of its current generation `world`) is SIGKILLed: it holds nothing the run needs, and a stop
    signal would wake it (SIGCONT) into the world, where its stop would be a vote that ends the run
    for the healthy nodes (its janitor cleans up after it). Any other rank is asked to stop (SIGTERM,
    SIGCONT if it is stopped), then killed if it has not within 10 s."""
    for rank, p in enumerate(procs):
        if rank in codes:
            continue
        if world is not None and rank not in world.members:
            log.error("node rank %d still running %.0f s after a peer ended, the run was over or every rank left "
                      "was stopped; the world dropped it (generation %d: nodes %s): killing it", rank, grace,
                      world.number, list(world.members))
            p.kill()
            p.wait()
            codes[rank] = p.returncode
            continue
        log.error("node rank %d still running %.0f s after a peer ended, the run was over or every rank left "
                  "was stopped: terminating it", rank, grace)
        p.terminate()
        with contextlib.suppress(OSError):
            p.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        codes[rank] = p.returncode


def _exit_code(codes: list[int], elastic: bool, outcome: str | None = "finished") -> int:
    """The launch's exit code from its ranks' (a rank killed by a signal, -N, counts as a shell
    shows it: 128 + N). Elastic: 0 when the run's summary says it finished (`outcome`), whoever
    wrote it (a rank of this launch, or a node that joined the run after this launch's ranks were
    lost); a writer that failed its final checkpoint after the others finished, or was killed then,
    ended the run otherwise."""
    bad = [c for c in codes if c != 0]
    if not bad or (elastic and outcome == "finished"):
        return 0
    code = bad[0]
    if elastic:  # the code of a rank that ended on its own (not killed) tells how the run ended
        code = next((c for c in bad if c > 0), code)
    return code if code > 0 else 128 - code
