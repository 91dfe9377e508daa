"""The chaos soak's report (launch.chaos): what the nodes' logs say happened around each fault, and
the checks at the end.

Every node logs to RUN_DIR/train.log (node 0) or train_rank<node>.log. From them: the writer's
status lines (`frames N | fps ... | version V`: the frame counter and policy version, rank 0 of
the generation of the time), `world changed: ...` (a generation formed: who left, who joined, how
long it took), `... the survivors re-form the world` (a loss noticed). Each generation is logged by
every member: the earliest line counts.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import time
from datetime import datetime

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[[^]]*\]\[\w+\] - (.*)$")
STATUS = re.compile(r"^frames ([\d,]+) \| fps .*\| version (\d+)")
CHANGE = re.compile(r"^world changed: (\d+) -> (\d+) nodes \(left (\[[\d, ]*\]|none), joined (\[[\d, ]*\]|none)\) "
                    r"in ([\d.]+) s, generation (\d+)")
NOTICED = re.compile(r"^rank \d+: .* during (.+?)(?: \(.*\))?: the survivors re-form the world$")


def node_of_log(path: str) -> int:
    m = re.search(r"train_rank(\d+)\.log$", path)
    return int(m.group(1)) if m else 0


def events(run_dir: str) -> list[dict]:
    """Every status, change and loss line of every node's log, by time."""
    out = []
    for path in glob.glob(os.path.join(run_dir, "train*.log")):
        node = node_of_log(path)
        with open(path, errors="replace") as f:
            for line in f:
                m = STAMP.match(line.rstrip("\n"))
                if not m:
                    continue
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                text = m.group(2)
                if s := STATUS.match(text):
                    out.append(dict(t=t, node=node, kind="status", frames=int(s.group(1).replace(",", "")),
                                    version=int(s.group(2))))
                elif c := CHANGE.match(text):
                    out.append(dict(t=t, node=node, kind="change", before=int(c.group(1)), after=int(c.group(2)),
                                    left=c.group(3), joined=c.group(4), seconds=float(c.group(5)),
                                    generation=int(c.group(6))))
                elif n := NOTICED.match(text):
                    out.append(dict(t=t, node=node, kind="noticed", during=n.group(1)))
    return sorted(out, key=lambda e: e["t"])


def newest_status_node(run_dir: str) -> int | None:
    """The node that logged the newest status line: rank 0 of the current generation."""
    best = (0.0, None)
    for path in glob.glob(os.path.join(run_dir, "train*.log")):
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 65536))
            lines = f.read().decode(errors="replace").splitlines()
        for line in reversed(lines):
            m = STAMP.match(line)
            if m and STATUS.match(m.group(2)):
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                best = max(best, (t, node_of_log(path)), key=lambda x: x[0])
                break
    return best[1]


def around(fault: dict, t0: float, until: float, evs: list[dict]) -> dict:
    """What the world did between fault (at t0 + fault["t"]) and `until` (the next fault)."""
    at = t0 + fault["t"]
    before = [e for e in evs if e["kind"] == "status" and e["t"] <= at]
    window = [e for e in evs if at < e["t"] <= until]
    changes = {}
    for e in window:
        if e["kind"] == "change":
            changes.setdefault(e["generation"], e)
    noticed = next((e for e in window if e["kind"] in ("noticed", "change")), None)
    # a survivor whose gradient all-reduce failed drops that iteration's batch (docs/several-nodes.md)
    dropped = {e["node"] for e in window if e["kind"] == "noticed" and e["during"] == "the gradient all-reduce"}
    where = sorted({e["during"] for e in window if e["kind"] == "noticed"})
    last_change = max((c["t"] for c in changes.values()), default=at)
    resumed = next((e for e in window if e["kind"] == "status" and e["t"] > last_change), None)
    out = dict(fault, changes=[f"gen {c['generation']}: {c['before']} -> {c['after']} nodes, left {c['left']}, "
                               f"joined {c['joined']} ({c['seconds']:.1f} s)" for _, c in sorted(changes.items())],
               dropped_batches=len(dropped), noticed_during=where,
               noticed_s=round(noticed["t"] - at, 1) if noticed else None,
               trained_again_s=round(resumed["t"] - at, 1) if resumed else None,
               frames_before=before[-1]["frames"] if before else 0,
               version_before=before[-1]["version"] if before else 0,
               frames_after=resumed["frames"] if resumed else None,
               version_after=resumed["version"] if resumed else None)
    return out


def build(run_dir: str, faults: list[dict], exits: list[dict], t0: float, target: int) -> dict:
    """The report: each fault with what followed it, every node exit, the checks on the run."""
    from nodes import checkpoint as ckpt

    evs = events(run_dir)
    ends = [t0 + f["t"] for f in faults[1:]] + [float("inf")]
    rows = [around(f, t0, end, evs) for f, end in zip(faults, ends)]
    status = [e for e in evs if e["kind"] == "status"]
    backwards = [(a["frames"], b["frames"]) for a, b in zip(status, status[1:]) if b["frames"] < a["frames"]]
    s = read_json(os.path.join(run_dir, "summary.json"))
    checks = [
        check("the run finished", s.get("outcome") == "finished" and s.get("env_frames", 0) >= target,
              f"outcome {s.get('outcome')!r}, {s.get('env_frames', 0):,} of {target:,} frames"),
        check("the survivors agree", len(set(s.get("param_checksums", []))) == 1,
              f"{s.get('nodes')} nodes, checksums {sorted(set(s.get('param_checksums', [])))}"),
        check("the frame counter never went back", not backwards and len(status) > 1,
              f"{len(status)} status lines, {len(backwards)} backwards {backwards[:3]}"),
    ]
    latest = ckpt.latest(run_dir)
    try:
        loaded = ckpt.load(latest)["policy_version"] if latest else None
        checks.append(check("the last checkpoint loads", loaded == s.get("policy_version"),
                            f"{os.path.basename(latest or 'none')}: version {loaded}, "
                            f"summary {s.get('policy_version')}"))
    except Exception as exc:  # a checkpoint that does not load is what this check is for
        checks.append(check("the last checkpoint loads", False, f"{latest}: {exc}"))
    return dict(faults=rows, exits=exits, generations=max((e["generation"] for e in evs if e["kind"] == "change"),
                                                            default=0),
                env_frames=s.get("env_frames"), seconds=round(time.time() - t0, 1), checks=checks)


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def check(name: str, ok: bool, detail: str) -> dict:
    return dict(name=name, ok=bool(ok), detail=detail)


def leftovers(run_dir: str, inside: dict, prefix: str, shm_before: set) -> list[dict]:
    """Nothing of the run is left: no process (in the namespaces before teardown, anywhere after),
    no namespace or bridge, no new /dev/shm entry (given the cleaners a few seconds)."""
    deadline = time.time() + 15
    while True:
        ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
              if n.startswith(prefix)]
        procs = subprocess.run(["pgrep", "-f", f"launch.node {run_dir}|store_keeper .*{run_dir}"],
                               capture_output=True, text=True).stdout.split()
        shm = sorted(set(os.listdir("/dev/shm")) - shm_before)
        if not (ns or procs or shm) or time.time() > deadline:
            break
        time.sleep(0.5)
    busy = {h: p for h, p in inside.items() if p}
    return [check("nothing left running", not procs and not busy,
                  f"after the run: {busy or 'none'} in the namespaces, {procs or 'none'} anywhere"),
            check("no namespace, bridge or /dev/shm entry left", not ns and not shm,
                  f"namespaces {ns or 'none'}, /dev/shm {shm or 'none'}")]


def print_report(r: dict) -> None:
    print(f"chaos soak: {len(r['faults'])} faults, {r['generations']} generations, {r['seconds'] / 60:.1f} min, "
          f"{r['env_frames'] or 0:,} frames")
    for f in r["faults"]:
        print(f"  {f['t']:7.0f} s  {f['kind']:<10} host {f['host']} node {f['node']}: noticed after "
              f"{_s(f['noticed_s'])}, trained again after {_s(f['trained_again_s'])}; frames {f['frames_before']:,} "
              f"-> {_n(f['frames_after'])}, version {f['version_before']} -> {_n(f['version_after'])}; "
              f"{f['dropped_batches']} batch(es) dropped")
        if f["noticed_during"]:
            print(f"             noticed during {', '.join(f['noticed_during'])}")
        for c in f["changes"]:
            print(f"             {c}")
    for e in r["exits"]:
        print(f"  {e['t']:7.0f} s  node {e['node']} on host {e['host']} exited with code {e['code']}")
    for c in r["checks"]:
        print(f"  {'PASS' if c['ok'] else 'FAIL'}  {c['name']}: {c['detail']}")


def _s(x) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _n(x) -> str:
    return "-" if x is None else f"{x:,}"
