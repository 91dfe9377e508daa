"""Launch to exit of a tiny CartPole run, for two checkouts of this repository in turn.

    python benchmarks/launch_to_exit.py OLD_CHECKOUT NEW_CHECKOUT [--nodes N] [--runs R]

Each run is `python -m launch.train` (2,048 env frames on one rollout worker) started in a
checkout and timed until its output closes: what a caller that reads the output sees (a test, a
sweep, a shell pipe), so a process that still holds the output open (the fork server, a node)
counts. The checkouts alternate (old, new, old, ...) so that a drift in the machine's speed hits
both; prints each run's seconds and the medians. Make the checkouts with `git worktree add`.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TINY = ["env=gym", "env.id=CartPole-v1", "sampler.num_workers=1", "sampler.envs_per_worker=4",
        "sampler.rollout=16", "sampler.batch_size=128", "train.max_env_frames=2000"]


def once(checkout: str, nodes: int) -> float:
    run_dir = tempfile.mkdtemp(prefix="launch_to_exit_")
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", *TINY,
                               f"nodes={nodes}"], cwd=checkout, capture_output=True, text=True)
        took = time.monotonic() - t0
        if proc.returncode != 0:
            sys.exit(f"{checkout}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        return took
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    times = {"old": [], "new": []}
    once(args.new, args.nodes)  # a warm-up: the page cache
    for _ in range(args.runs):
        for side in ("old", "new"):
            times[side].append(once(getattr(args, side), args.nodes))
    for side, ts in times.items():
        print(f"{side}: " + " ".join(f"{t:.2f}" for t in ts) + f" s, median {statistics.median(ts):.2f} s")
    print(f"new / old (medians): {statistics.median(times['new']) / statistics.median(times['old']):.2f}")


if __name__ == "__main__":
    main()
