"""VizDoom matches between learning agents: one engine per player, stepped in lock-step.

A match of env.agents players (plus env.bots of the engine's bots, added by the host) runs one
engine per player, each in a plain subprocess (nodes/envs/doom_player.py), joined over local UDP
on a free port: player 0 hosts, the others join. Each agent is an env slot of its own
(`AgentMatch.slots`), so the sampler, policy workers and learner see agents as envs.

Lock-step, tic by tic: every player takes tic k before any takes tic k+1 (measured on vizdoom
1.3.2: letting each engine run a whole 4-tic make_action deadlocks within a few hundred steps, the
client waiting in a tic for network traffic the host, idle between steps, does not send; stepped
tic by tic, both engines' tics were equal after every step over whole matches). Only the step's
last tic renders and reads the state. The players respawn by the engine (sv_forcerespawn): an
explicit respawn_player() takes a tic of one engine only and stalls the others.

A slot's step needs its match's every action first: a rollout worker calls `submit(action)` on
every slot of an env group, then `step(action)` on each (nodes/sampling/rollout_worker.py). The last
submit runs the match's step.

A match whose player dies, fails or does not answer within env.match_timeout_s is killed (every
player process, its engine, the engine's /dev/shm segments) and started afresh: the step returns
done with info["aborted"] (the match is not reported as finished) and `restarts` counts it.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection

from nodes import seeds
from nodes.envs import doom, doom_match
from nodes.janitor import INSTANCE_ARG, descendants

PLAYER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doom_player.py")
START_ATTEMPTS = 3  # a match that fails to start this many times in a row fails the worker


class MatchFailed(Exception):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the engines talk UDP
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_players(procs: list[subprocess.Popen]) -> None:
    """SIGKILL the players and their engines (engines ignore SIGTERM); remove the engines' shm."""
    pids = [pid for p in procs for pid in descendants(p.pid)]  # each player and its engine
    instances = set()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            m = INSTANCE_ARG.search(f.read())
            if m:
                instances.add(m.group(1).decode())
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(5)
    for inst in instances:
        for path in glob.glob(f"/dev/shm/ViZDoom*{inst}"):
            with contextlib.suppress(OSError):
                os.unlink(path)


class AgentMatch:
    def __init__(self, env_cfg, seed: int):
        self.cfg, self.seed, self.n = env_cfg, seed, env_cfg.agents
        self.spec = doom.spec(env_cfg)
        self.frameskip = env_cfg.frameskip
        self.timeout = float(env_cfg.match_timeout_s)
        self.restarts = 0  # matches killed and started afresh (a player died or hung)
        self.tics: list[int] = []  # each engine's tic in the match after the last step (all equal: lock-step)
        self.slots = [AgentSlot(self, j) for j in range(self.n)]
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []
        self._dir: str | None = None
        self._actions: list = [None] * self.n
        self._results: list = [None] * self.n
        self._first: list = [None] * self.n  # each player's observation of the match beginning
        self._start()

    # -- players

    def _start(self) -> None:
        reason = ""
        for _ in range(START_ATTEMPTS):
            try:
                self._spawn()
                return
            except MatchFailed as exc:
                reason = str(exc)
                self._kill()
        raise RuntimeError(f"a VizDoom match of {self.n} agents failed to start {START_ATTEMPTS} times: {reason}")

    def _spawn(self) -> None:
        port = free_port()
        # VizDoom writes _vizdoom/ into the working directory, and engines starting at once in one
        # directory race: each player gets its own
        self._dir = tempfile.mkdtemp(prefix="match", dir=os.getcwd())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.dirname(PLAYER_SCRIPT))), os.environ.get("PYTHONPATH", "")])}
        for j in range(self.n):
            mine, theirs = socket.socketpair()
            cwd = os.path.join(self._dir, f"player{j}")
            os.makedirs(cwd)
            proc = subprocess.Popen([sys.executable, PLAYER_SCRIPT, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                    cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            theirs.close()
            self._procs.append(proc)
            self._conns.append(Connection(mine.detach()))
            seed = seeds.derive(self.seed, seeds.PLAYER, j, self.restarts)
            self._conns[j].send((self.cfg, seed, doom_match.Seat(j, self.n, port)))
        for j in range(self.n):
            self._first[j] = self._answer(j, init=True)[1]

    def _answer(self, j: int, init: bool = False):
        conn = self._conns[j]
        wait = self.timeout + (30.0 if init else 0.0)  # an engine starts in about a second, more on a busy core
        try:
            if not conn.poll(wait):
                raise MatchFailed(f"player {j} did not answer in {wait:g} s")
            msg = conn.recv()
        except (EOFError, OSError):
            code = self._procs[j].poll()
            raise MatchFailed(f"player {j} exited (exit code {code})") from None
        if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "error":
            raise MatchFailed(f"player {j} failed: {msg[1].strip().splitlines()[-1]}")
        return msg

    def _kill(self) -> None:
        for c in self._conns:
            c.close()
        kill_players(self._procs)
        self._procs, self._conns = [], []
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- the slots' interface

    def submit(self, j: int, action) -> None:
        self._actions[j] = action
        if all(a is not None for a in self._actions):
            self._step()

    def _step(self) -> None:
        try:
            for tic in range(self.frameskip):
                last = tic == self.frameskip - 1
                for j, c in enumerate(self._conns):
                    c.send(("tic", self._actions[j] if tic == 0 else None, last))
                answers = [self._answer(j) for j in range(self.n)]
            self.tics = [a[5] for a in answers]
            if len(set(self.tics)) > 1 or len({a[2] for a in answers}) > 1:
                raise MatchFailed(f"the players are out of lock-step (tics {self.tics}, "
                                  f"done {[a[2] for a in answers]})")
            for j, (obs, reward, done, info, first, _) in enumerate(answers):
                self._results[j] = (obs, reward, done, info)
                if done:
                    self._first[j] = first
        except (MatchFailed, OSError) as exc:
            self._kill()
            self.restarts += 1
            self._start()
            for j in range(self.n):  # the broken match ends here; the fresh one's start is the next reset
                self._results[j] = (None, 0.0, True, {"aborted": True, "restart": str(exc) if j == 0 else ""})
        self._actions = [None] * self.n

    def result(self, j: int):
        out, self._results[j] = self._results[j], None
        if out is None:
            raise RuntimeError(f"agent {j} of a match stepped before every agent of the match had submitted its "
                               "action (call submit() on every slot of the match first)")
        return out

    def render(self, j: int):
        self._conns[j].send(("render",))
        return self._answer(j)

    def close(self) -> None:
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.send(("close",))
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        self._kill()  # what did not exit in time, and the directories


class AgentSlot:
    """Agent j of a match, as an env (nodes/envs/__init__.py's interface, plus submit())."""

    def __init__(self, match: AgentMatch, j: int):
        self.match, self.j, self.spec = match, j, match.spec

    def submit(self, action) -> None:
        self.match.submit(self.j, action)

    def step(self, action):
        return self.match.result(self.j)

    def reset(self):
        return self.match._first[self.j]

    def render(self):
        return self.match.render(self.j)

    @property
    def restarts(self) -> int:
        return self.match.restarts

    def close(self) -> None:
        if self.j == 0:
            self.match.close()
