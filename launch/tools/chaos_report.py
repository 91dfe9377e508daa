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

from sync.store_keeper import running as keepers_running

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[[^]]*\]\[\w+\] - (.*)$")
STATUS = re.compile(r"^frames ([\d,]+) \| fps .*\| version (\d+)")
CHANGE = re.compile(r"^world changed: (\d+) -> (\d+) nodes \(left (\[[\d, ]*\]|none), joined (\[[\d, ]*\]|none)\) "
                    r"in ([\d.]+) s, generation (\d+), now rank (\d+)")
ENTERED = re.compile(r"^node \d+ is rank (\d+) of \d+ \(generation (\d+),")
NOTICED = re.compile(r"^rank \d+: .*? during (.+?)(?: \(.*\))?: the survivors re-form the world$")


def node_of_log(path: str) -> int:
    m = re.search(r"train_rank(\d+)\.log$", path)
    return int(m.group(1)) if m else 0


def events(run_dir: str, since: float = 0.0) -> list[dict]:
    """Every status, change, entry and loss line of every node's log from `since` on, by time."""
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
                if t < since:  # an earlier launch's lines in the same run directory
                    continue
                if s := STATUS.match(text):
                    out.append(dict(t=t, node=node, kind="status", frames=int(s.group(1).replace(",", "")),
                                    version=int(s.group(2))))
                elif c := CHANGE.match(text):
                    out.append(dict(t=t, node=node, kind="change", before=int(c.group(1)), after=int(c.group(2)),
                                    left=_ids(c.group(3)), joined=_ids(c.group(4)), seconds=float(c.group(5)),
                                    generation=int(c.group(6)), rank=int(c.group(7))))
                elif e := ENTERED.match(text):
                    out.append(dict(t=t, node=node, kind="entered", rank=int(e.group(1)), generation=int(e.group(2))))
                elif n := NOTICED.match(text):
                    out.append(dict(t=t, node=node, kind="noticed", during=n.group(1)))
    return sorted(out, key=lambda e: e["t"])


def _ids(text: str) -> list[int]:
    return [] if text == "none" else [int(x) for x in text.strip("[]").split(",") if x.strip()]


def rank0_node(run_dir: str) -> int | None:
    """The node that is rank 0 (the store's host, the writer) of the newest generation its logs name."""
    best = (-1, None)
    for e in events(run_dir):
        if e["kind"] in ("change", "entered") and e["rank"] == 0 and e["generation"] > best[0]:
            best = (e["generation"], e["node"])
    return best[1]


def generations(evs: list[dict]) -> dict[int, dict]:
    """Each generation as its members logged it, merged: members differ (a node dropped and back
    logs its own stale 'before'), so the left and joined nodes are the union of theirs, the size
    before is the previous generation's, and its time is the first member's line."""
    gens: dict[int, dict] = {}
    for e in evs:
        if e["kind"] != "change":
            continue
        g = gens.setdefault(e["generation"], dict(t=e["t"], after=e["after"], left=set(), joined=set(), seconds=0.0))
        g["left"] |= set(e["left"])
        g["joined"] |= set(e["joined"])
        g["seconds"] = max(g["seconds"], e["seconds"])
    # who was in the world: generation 0's members, then each change applied (a stale 'left' of a
    # node already gone, from a member that was away, is not this generation's)
    members = {e["node"] for e in evs if e["kind"] == "entered" and e["generation"] == 0}
    for number in sorted(gens):
        g = gens[number]
        g["left"] &= members or g["left"]
        members = (members - g["left"]) | g["joined"]
        g["before"] = g["after"] + len(g["left"]) - len(g["joined"])
    return gens


def around(fault: dict, t0: float, until: float, evs: list[dict], gens: dict[int, dict]) -> dict:
    """What the world did between fault (at t0 + fault["t"]) and `until` (the next fault)."""
    at = t0 + fault["t"]
    before = [e for e in evs if e["kind"] == "status" and e["t"] <= at]
    window = [e for e in evs if at < e["t"] <= until]
    changes = {n: g for n, g in gens.items() if at < g["t"] <= until}
    noticed = next((e for e in window if e["kind"] in ("noticed", "change")), None)
    first_change = min((g["t"] for g in changes.values()), default=at)
    resumed = next((e for e in window if e["kind"] == "status" and e["t"] > first_change), None)
    # a survivor whose gradient all-reduce failed drops that iteration's batch (docs/multi-node.md)
    dropped = {e["node"] for e in window if e["kind"] == "noticed" and e["during"] == "the gradient all-reduce"}
    during = sorted({e["during"] for e in window if e["kind"] == "noticed"})
    return dict(fault,
                changes=[f"gen {n}: {g['before']} -> {g['after']} nodes, left {sorted(g['left']) or 'none'}, joined "
                         f"{sorted(g['joined']) or 'none'} ({g['seconds']:.1f} s)" for n, g in sorted(changes.items())],
                dropped_batches=len(dropped), noticed_during=during,
                noticed_s=round(noticed["t"] - at, 1) if noticed else None,
                trained_again_s=round(resumed["t"] - at, 1) if resumed else None,
                frames_before=before[-1]["frames"] if before else 0,
                version_before=before[-1]["version"] if before else 0,
                frames_after=resumed["frames"] if resumed else None,
                version_after=resumed["version"] if resumed else None)


def build(run_dir: str, faults: list[dict], exits: list[dict], t0: float, target: int) -> dict:
    """The report: each fault with what followed it, every node exit, the checks on the run."""
    evs = events(run_dir, since=t0)
    gens = generations(evs)
    ends = [t0 + f["t"] for f in faults[1:]] + [float("inf")]
    rows = [around(f, t0, end, evs, gens) for f, end in zip(faults, ends)]
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
        checkpoint_check(run_dir, s.get("policy_version")),
        exits_check(faults, exits),
    ]
    return dict(faults=rows, exits=exits, generations=max(gens, default=0), env_frames=s.get("env_frames"),
                seconds=round(time.time() - t0, 1), checks=checks)


def checkpoint_check(run_dir: str, version: int | None) -> dict:
    from nodes.record import checkpoint as ckpt

    latest = ckpt.latest(run_dir)
    try:
        loaded = ckpt.load(latest)["policy_version"] if latest else None
    except Exception as exc:  # a checkpoint that does not load is what this check is for
        return check("the last checkpoint loads", False, f"{latest}: {exc}")
    return check("the last checkpoint loads", latest is not None and loaded == version,
                 f"{os.path.basename(latest or 'none')}: version {loaded}, summary {version}")


def exits_check(faults: list[dict], exits: list[dict]) -> dict:
    """Every node ended with the run (0) or by one of our SIGKILLs, none on its own otherwise."""
    killed = {f["host"] for f in faults if f["kind"] in ("kill", "kill_store")}
    odd = [e for e in exits if e["code"] != 0 and not (e["code"] == -9 and e["host"] in killed)]
    return check("every node ended with the run or by a kill", not odd,
                 f"{len(exits)} exits, {sum(e['code'] == 0 for e in exits)} at the end; others: {odd or 'none'}")


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def check(name: str, ok: bool, detail: str) -> dict:
    return dict(name=name, ok=bool(ok), detail=detail)


SHM_OURS = ("sem.mp-", "ViZDoom")  # what a node can leave in /dev/shm (other programs' entries are not ours)


def leftovers(run_dir: str, inside: dict, prefix: str, shm_before: set) -> list[dict]:
    """Nothing of the run is left: no process (in the namespaces before teardown, anywhere after),
    no namespace, bridge or /etc/netns file, no new /dev/shm entry of the kinds nodes make (given
    the cleaners a few seconds)."""
    deadline = time.time() + 15
    while True:
        ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
              if n.startswith(prefix)]
        bridge = subprocess.run(["ip", "link", "show", prefix + "br"], capture_output=True).returncode == 0
        etc = glob.glob(f"/etc/netns/{prefix}h*")
        procs = subprocess.run(["pgrep", "-f", f"launch.node {run_dir}"], capture_output=True,
                               text=True).stdout.split() + [str(pid) for pid in keepers_running(run_dir)]
        shm = sorted(n for n in set(os.listdir("/dev/shm")) - shm_before if n.startswith(SHM_OURS))
        if not (ns or bridge or etc or procs or shm) or time.time() > deadline:
            break
        time.sleep(0.5)
    busy = {h: p for h, p in inside.items() if p}
    return [check("nothing left running", not procs and not busy,
                  f"after the run: {busy or 'none'} in the namespaces, {procs or 'none'} anywhere"),
            check("no namespace, bridge or /dev/shm entry left", not (ns or bridge or etc or shm),
                  f"namespaces {ns or 'none'}, bridge {'left' if bridge else 'gone'}, /etc/netns {etc or 'none'}, "
                  f"/dev/shm {shm or 'none'}")]


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
