"""The soak: does anything grow over a long run? Memory, open files, threads, shared memory and the
run directory of two real training runs, per kind of process, sampled for hours.

    # the 2-hour soak (a doom_basic node and a 2-node CartPole run beside it, from this checkout):
    python benchmarks/soak.py /tmp/soak --minutes 120 --every-s 60 --skip-s 600
    # the short check that the script works (about 4 minutes of training):
    python benchmarks/soak.py /tmp/soak_check --minutes 4 --every-s 30 --skip-s 60
    # the table and plot again from the samples:
    python benchmarks/soak.py --report /tmp/soak/soak.jsonl --skip-s 600 --plot /tmp/soak/soak.png

Memory that grows over a long run is the fault users of a trainer report most; a growth of a few
MB an hour is invisible in the 30 s runs of the tests and ends a week-long run. This script starts
`python -m launch.train env=doom_basic` and `python -m launch.train nodes=2 env=gym
env.id=CartPole-v1`, each for `--minutes` of training (train.max_seconds) in its own run directory
under OUT_DIR, in its own session (a Ctrl-C in the terminal reaches this script only). Every
`--every-s` seconds it finds every process of each run (the launcher's descendants by parent pid,
and anything left in its session: a process orphaned by a fault is a leak too), names each one's
kind (`kind_of`: launcher, node, policy / rollout worker, evaluator, janitor, fork server, store
keeper, resource tracker, VizDoom engine) and reads /proc/<pid>/smaps_rollup (RSS, PSS),
/proc/<pid>/fd (open fds) and /proc/<pid>/status (threads); per run, the bytes of its directory
in four parts (tb/, checkpoints/, the logs, everything else); and the machine's /dev/shm (bytes in
use, including unlinked segments, and entries: other programs' too). Each sample is one JSON line
in OUT_DIR/soak.jsonl, after a first line with the commands, commit and machine. When the runs end
(or on Ctrl-C / SIGTERM: SIGINT to each launcher, which checkpoints and stops, then a wait) it
prints the table of benchmarks/soak_report.py (per run and kind: the value after the warm-up
`--skip-s`, at the end, and the least-squares slope per hour after the warm-up) and writes the plot
(OUT_DIR/soak.png or --plot).

`--attach NAME=PID:RUN_DIR` watches a run started elsewhere instead (repeatable; then no run is
started, and a Ctrl-C stops the watching only). Extra overrides for the runs: `--doom "..."`,
`--cartpole "..."`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import soak_report  # noqa: E402  (beside this script)

from nodes.record.memory import dev_shm_used, process_memory  # noqa: E402

RUNS = {"doom": ["env=doom_basic"], "cartpole": ["nodes=2", "env=gym", "env.id=CartPole-v1"]}


@dataclass
class Proc:
    """One process as /proc/<pid>/stat and cmdline show it."""

    pid: int
    ppid: int
    sid: int
    start: int  # clock ticks after boot: the order the fork server started its children in
    comm: str
    argv: list[str]


def processes() -> dict[int, Proc]:
    """Every live (not zombie) process of the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the command may hold spaces and ')'
        if fields[0] != "Z":
            out[int(name)] = Proc(int(name), int(fields[1]), int(fields[3]), int(fields[19]),
                                  stat[stat.index("(") + 1:stat.rindex(")")], argv)
    return out


def members(root: int, procs: dict[int, Proc]) -> list[int]:
    """root, its descendants, and every process of root's session when root leads one."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [root] if root in procs else []
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    out.update(p.pid for p in procs.values() if p.sid == root)
    return sorted(out)


def _module(p: Proc) -> str:
    """`launch.node` for `python -m launch.node ...`, the script's name for `python path.py`, else ''."""
    args = [a for a in p.argv[1:4] if a]
    if len(args) >= 2 and args[0] == "-m":
        return args[1]
    return os.path.basename(args[0]) if args and args[0].endswith(".py") else ""


def kind_of(p: Proc, procs: dict[int, Proc]) -> str:
    """The kind of a run's process, from what the project sets: the evaluator and store keeper name
    themselves (comm), the others are told apart by their command line; a fork server's child is a
    "worker" here (policy or rollout: `name_workers`). A launch.train that started no launch.node
    is the node itself (nodes=1 trains in the launcher's process)."""
    cmd, parent = " ".join(p.argv), procs.get(p.ppid)
    if p.comm in ("evaluator", "store_keeper"):
        return p.comm.replace("_", " ")
    if "multiprocessing.resource_tracker" in cmd:
        return "resource tracker"
    if "multiprocessing.forkserver" in cmd:
        return "worker" if parent and "multiprocessing.forkserver" in " ".join(parent.argv) else "fork server"
    if "vizdoom" in p.comm.lower():
        return "evaluator's engine" if parent and parent.comm == "evaluator" else "vizdoom engine"
    module = _module(p)
    if module == "janitor.py":
        return "janitor"
    if module == "launch.node":
        return "node"
    if module == "launch.train":
        nodes = any(_module(c) == "launch.node" for c in procs.values() if c.ppid == p.pid)
        return "launcher" if nodes else "node"
    return "other"


def name_workers(kinds: dict[int, str], procs: dict[int, Proc], policy_workers: int) -> None:
    """A node starts its policy workers before its rollout workers, all from its fork server: of each
    server's workers, the first `policy_workers` started are the policy workers."""
    servers: dict[int, list[Proc]] = {}
    for pid, kind in kinds.items():
        if kind == "worker":
            servers.setdefault(procs[pid].ppid, []).append(procs[pid])
    for workers in servers.values():
        for i, p in enumerate(sorted(workers, key=lambda p: (p.start, p.pid))):
            kinds[p.pid] = "policy worker" if i < policy_workers else "rollout worker"


def figures(pid: int) -> dict | None:
    """rss, pss (bytes), fds and threads of one process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            threads = next(int(ln.split()[1]) for ln in f if ln.startswith("Threads:"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None
    rss, pss = process_memory(pid)
    return dict(rss=rss, pss=pss, fds=fds, threads=threads)


def dir_bytes(run_dir: str) -> dict[str, int]:
    """The run directory's bytes (files' sizes) in four parts: tb/, checkpoints/, the *.log files
    at its top, everything else (config, summary, the elastic store's files, the workers' dirs)."""
    out = dict(tb=0, checkpoints=0, logs=0, other=0)
    for top, _, files in os.walk(run_dir):
        rel = os.path.relpath(top, run_dir).split(os.sep)[0]
        for name in files:
            try:
                size = os.lstat(os.path.join(top, name)).st_size
            except OSError:  # a checkpoint rotated away meanwhile
                continue
            part = rel if rel in ("tb", "checkpoints") else "logs" if rel == "." and name.endswith(".log") else "other"
            out[part] += size
    return out


@dataclass
class Run:
    name: str
    pid: int
    run_dir: str
    command: list[str] | None = None  # None: attached
    popen: subprocess.Popen | None = None
    policy_workers: int = 0  # sampler.num_policy_workers, once read

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return os.path.exists(f"/proc/{self.pid}")

    def read_policy_workers(self) -> int:
        """sampler.num_policy_workers of the run's resolved config (written early in the launch)."""
        if not self.policy_workers:
            try:
                with open(os.path.join(self.run_dir, "config.yaml")) as f:
                    self.policy_workers = int(yaml.safe_load(f)["sampler"]["num_policy_workers"])
            except (OSError, KeyError, TypeError, ValueError):
                return 1  # the default, until the file is there
        return self.policy_workers


def sample_run(run: Run, procs: dict[int, Proc]) -> dict:
    """Per kind: the count and the sums of figures over its processes; the run directory's parts."""
    pids = members(run.pid, procs)
    kinds = {pid: kind_of(procs[pid], procs) for pid in pids}
    name_workers(kinds, procs, run.read_policy_workers())
    out: dict[str, dict] = {}
    for pid, kind in kinds.items():
        got = figures(pid)
        if got is not None:
            acc = out.setdefault(kind, dict(n=0, rss=0, pss=0, fds=0, threads=0))
            acc["n"] += 1
            for k, v in got.items():
                acc[k] += v
    return dict(procs=out, dir=dir_bytes(run.run_dir))


def take_sample(runs: list[Run], t: float) -> dict:
    """Every live run's processes and directory; the machine's /dev/shm."""
    procs = processes()
    live = {r.name: sample_run(r, procs) for r in runs if r.alive()}
    return dict(t=round(t, 1), time=round(time.time(), 1), runs=live,
                machine=dict(bytes=dev_shm_used(), entries=len(os.listdir("/dev/shm"))))


def progress(s: dict) -> str:
    """One line a sample: per run its processes, PSS and fds; /dev/shm."""
    parts = [f"soak: {s['t'] / 60:5.1f} min"]
    for name, r in s["runs"].items():
        k = r["procs"].values()
        parts.append(f"{name}: {sum(x['n'] for x in k)} processes, PSS {sum(x['pss'] for x in k) / 2**20:.0f} MB, "
                     f"{sum(x['fds'] for x in k)} fds, dir {sum(r['dir'].values()) / 2**20:.1f} MB")
    parts.append(f"/dev/shm {s['machine']['bytes'] / 2**20:.0f} MB in {s['machine']['entries']} entries")
    return " | ".join(parts)


def start_runs(out_dir: str, names: list[str], minutes: float, extra: dict[str, str]) -> list[Run]:
    """Each run in OUT_DIR/<name>, its output in OUT_DIR/<name>.out, in a session of its own."""
    runs = []
    for name in names:
        run_dir = os.path.join(out_dir, name)
        # no frame limit (train.max_env_frames=0): doom_basic's default 10M ends a run of ~2,300
        # frames/s after about 72 minutes, before a 2-hour soak is over; the time limit ends it
        cmd = [sys.executable, "-m", "launch.train", *RUNS[name], "train.max_env_frames=0",
               *shlex.split(extra.get(name, "")), f"train.max_seconds={minutes * 60:g}", f"hydra.run.dir={run_dir}"]
        with open(os.path.join(out_dir, f"{name}.out"), "wb") as out:
            p = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        runs.append(Run(name, p.pid, run_dir, cmd, p))
        print(f"soak: started {name} (pid {p.pid}): {shlex.join(cmd)}", flush=True)
    return runs


def stop_runs(runs: list[Run], grace_s: float = 180.0) -> None:
    """SIGINT to each launcher this script started (a launch's own Ctrl-C: it checkpoints and stops
    its nodes), then wait; SIGTERM after `grace_s`, SIGKILL (the janitors clean up) 30 s later."""
    mine = [r.popen for r in runs if r.popen is not None and r.popen.poll() is None]
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
        for p in mine:
            if p.poll() is None:
                p.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while any(p.poll() is None for p in mine) and time.monotonic() < deadline:
            time.sleep(0.5)
        if all(p.poll() is not None for p in mine):
            return


class Stop:
    """Set by SIGINT or SIGTERM: the soak stops sampling and stops its runs."""

    def __init__(self):
        self.signal: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._set)

    def _set(self, sig, _frame) -> None:
        self.signal = sig


def watch(runs: list[Run], every_s: float, path: str, meta: dict, stop: Stop) -> None:
    """Sample every `every_s` into `path` (JSON lines, `meta` first) until every run has ended or
    `stop` is set."""
    t0, tick = time.monotonic(), 0
    with open(path, "w") as f:
        f.write(json.dumps(dict(meta=meta)) + "\n")
        while stop.signal is None and any(r.alive() for r in runs):
            s = take_sample(runs, time.monotonic() - t0)
            f.write(json.dumps(s) + "\n")
            f.flush()
            print(progress(s), flush=True)
            tick += 1
            while (stop.signal is None and any(r.alive() for r in runs)
                   and time.monotonic() < t0 + tick * every_s):
                time.sleep(0.5)


def _commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _attach(specs: list[str]) -> list[Run]:
    runs = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        pid, _, run_dir = rest.partition(":")
        if not (name and pid.isdigit() and run_dir and os.path.exists(f"/proc/{pid}")):
            sys.exit(f"error: --attach {spec!r}: NAME=PID:RUN_DIR of a live process")
        runs.append(Run(name, int(pid), run_dir))
    return runs


def soak(args) -> str:
    """Start (or attach to) the runs, watch them, stop them; the samples' path."""
    out_dir = args.out_dir
    for name in [] if args.attach else args.runs:
        if os.path.exists(os.path.join(out_dir, name)):  # a launch there would resume that run
            sys.exit(f"error: {os.path.join(out_dir, name)} exists: give the soak a new directory")
    os.makedirs(out_dir, exist_ok=True)
    stop = Stop()
    extra = dict(doom=args.doom, cartpole=args.cartpole)
    runs = _attach(args.attach) if args.attach else start_runs(out_dir, args.runs, args.minutes, extra)
    meta = dict(command=shlex.join([sys.executable, *sys.argv]), commit=_commit(), every_s=args.every_s,
                machine=f"{platform.node()}, {os.cpu_count()} cores", started=time.strftime("%Y-%m-%d %H:%M:%S"),
                runs={r.name: dict(pid=r.pid, run_dir=r.run_dir, command=r.command and shlex.join(r.command))
                      for r in runs})
    path = os.path.join(out_dir, "soak.jsonl")
    try:
        watch(runs, args.every_s, path, meta, stop)
    finally:
        if stop.signal is not None:
            print(f"soak: stopped by {signal.Signals(stop.signal).name}: stopping the runs", flush=True)
        stop_runs(runs)
    meta["runs"] = {r.name: dict(meta["runs"][r.name], exit=r.popen and r.popen.returncode) for r in runs}
    with open(path, "a") as f:  # the exit codes, in the record the report reads
        f.write(json.dumps(dict(meta=meta)) + "\n")
    return path


def report(path: str, skip_s: float, png: str) -> None:
    meta, samples = soak_report.load(path)
    if not samples:
        sys.exit(f"error: {path} holds no sample")
    print(soak_report.header(meta, samples, skip_s))
    print(soak_report.table(samples, skip_s), flush=True)
    soak_report.plot(samples, skip_s, png)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", help="the runs' directories, the samples and the plot go here")
    ap.add_argument("--minutes", type=float, default=120.0, help="each run's training time (train.max_seconds)")
    ap.add_argument("--every-s", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--skip-s", type=float, default=600.0, help="the warm-up the slopes leave out")
    ap.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    ap.add_argument("--doom", default="", help="extra overrides for the doom run")
    ap.add_argument("--cartpole", default="", help="extra overrides for the CartPole run")
    ap.add_argument("--attach", action="append", default=[], metavar="NAME=PID:RUN_DIR",
                    help="watch a run started elsewhere (repeatable); starts none")
    ap.add_argument("--report", metavar="FILE.jsonl", help="only the table and plot of an earlier soak's samples")
    ap.add_argument("--plot", help="the plot's path (default: beside the samples, soak.png)")
    args = ap.parse_args()
    if bool(args.report) == bool(args.out_dir):
        ap.error("give OUT_DIR (a soak) or --report FILE.jsonl (its table again), one of the two")
    path = args.report or soak(args)
    report(path, args.skip_s, args.plot or os.path.join(os.path.dirname(os.path.abspath(path)), "soak.png"))


if __name__ == "__main__":
    main()
