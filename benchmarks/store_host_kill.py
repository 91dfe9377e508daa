"""How long the survivors take to notice that the store's host (rank 0) was killed, for one or two
checkouts of this repository in turn.

    python benchmarks/store_host_kill.py CHECKOUT [CHECKOUT ...] [--runs R]

Each run: three elastic CartPole nodes on this machine (`python -m launch.train nodes=3` started
in the checkout); once they train, SIGKILL of node 0 (rank 0, whose store keeper hosts the
generation's store); then each survivor's `lost rank 0` line in its log, timed from the kill, and
the first world the survivors formed (2 nodes when both noticed within sync.settle_s of each
other; 1 when one was late). The checkouts alternate (a, b, a, ...) so that a drift in the
machine's speed hits both. Prints one line per run and, per checkout, the late survivors (> 2 s).
Make the checkouts with `git worktree add`.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime

THREE = ["nodes=3", "env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
         "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=128",
         "train.status_every_s=1", "sync.elastic=true", "sync.min_nodes=2", "sync.timeout_s=30",
         "train.max_env_frames=0"]
LATE_S = 2.0
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def read_until(proc, pattern: str, timeout: float):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        m = re.search(pattern, line)
        if m:
            return m
    raise RuntimeError(f"'{pattern}' not seen in {timeout} s")


def stamp(line: str) -> float:
    return datetime.strptime(STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def once(checkout: str) -> tuple[list[float | None], int | None]:
    """(each survivor's seconds from the kill to its `lost rank 0` line, or None), the first world size."""
    run_dir = tempfile.mkdtemp(prefix="store_host_kill_")
    proc = subprocess.Popen([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", *THREE], cwd=checkout,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        pids = [int(p) for p in read_until(proc, r"started 3 nodes on .* \(pids ([\d ]+)\)", 60).group(1).split()]
        read_until(proc, r"frames [\d,]+ \| fps", 120)
        time.sleep(2.0)
        killed = time.time()
        os.kill(pids[0], signal.SIGKILL)
        time.sleep(20.0)  # past sync.settle_s: a late survivor has noticed and joined by then
        noticed, first = [], None
        for rank in (1, 2):
            with open(os.path.join(run_dir, f"train_rank{rank}.log")) as f:
                log = f.read().splitlines()
            lost = [stamp(s) for s in log if "lost rank 0" in s and stamp(s) >= killed - 0.5]
            noticed.append(round(lost[0] - killed, 2) if lost else None)
            sizes = [int(m.group(1)) for s in log if (m := re.search(r"world changed: 3 -> (\d) nodes", s))]
            first = min(sizes[:1] + ([first] if first else [])) if sizes else first
        return noticed, first
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", nargs="+")
    ap.add_argument("--runs", type=int, default=6, help="runs per checkout")
    args = ap.parse_args()
    late = {c: 0 for c in args.checkouts}
    for i in range(args.runs):
        for c in args.checkouts:
            noticed, first = once(c)
            late[c] += sum(1 for s in noticed if s is None or s > LATE_S)
            print(f"{c} run {i}: survivors noticed after {noticed} s, first world {first} nodes", flush=True)
    for c in args.checkouts:
        print(f"{c}: {late[c]} of {2 * args.runs} survivors later than {LATE_S:g} s")


if __name__ == "__main__":
    main()
