"""`python -m launch.bench [overrides]`: throughput of one layout, three phases in one run.

1. simulate: the rollout workers step their envs with random actions (no inference, no learning);
2. sample:   the full sampler with policy workers, finished trajectories discarded (no learning);
3. train:    the full node, learning.
Each phase runs `bench.warmup_s` then is measured for `bench.seconds`. Frames are env frames
(agent steps x frameskip). The last line printed is one JSON object.

With nodes=N (N > 1) it trains twice for warmup_s + seconds each, once as a single node and once
as N local nodes (launch.local), and reports the total and per-node training frames/s, each
node's share of time spent waiting in the gradient all-reduce, and the scaling ratio (N-node
total / single node). On one machine the N nodes share its cores; on a cluster, run it per node
count to read scaling.

With bench.modes=[async,sync,deterministic] it measures only the train phase, once per training
scheme (sampler.mode) on the same layout, one after the other, and reports each one's frames/s
and its ratio to the first mode's: the price of a scheme as one number.

Ctrl-C or SIGTERM stops it with one line and exit code 128 + the signal, as launch.train does.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import sys

import hydra

from launch.app import check, hydra_run_dir, resolve
from launch.exits import report
from launch.overrides import check_command
from nodes.errors import Stopped

log = logging.getLogger("launch.bench")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    try:
        if obj.bench.modes:
            bench_modes(obj)
        elif obj.nodes > 1:
            bench_nodes(obj)
        else:
            bench_node(obj)
    except (Exception, KeyboardInterrupt) as exc:
        code = report(exc)  # a failure: one line (an unexpected error's traceback to the console)
        if isinstance(exc, (Stopped, KeyboardInterrupt)):
            print(f"bench: stopped by {exc if isinstance(exc, Stopped) else 'SIGINT'}", file=sys.stderr, flush=True)
        shutil.rmtree(obj.run_dir, ignore_errors=True)
        sys.exit(code)


def bench_node(obj) -> None:
    from nodes.node import Node
    s = obj.sampler
    print(f"bench: env={obj.env.name} workers={s.num_workers} envs_per_worker={s.envs_per_worker} "
          f"double_buffered={s.double_buffered} policy_workers={s.num_policy_workers} "
          f"batch={s.batch_size} rollout={s.rollout} seconds/phase={obj.bench.seconds}", flush=True)
    fps = {}
    for phase in ("simulate", "sample", "train"):
        fps[phase] = Node(obj, is_writer=False).measure(phase, obj.bench.seconds, obj.bench.warmup_s)
        print(f"{phase:>9}: {fps[phase]:10.1f} env frames/s", flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind
    result = dict(pure_sim_fps=round(fps["simulate"], 1), sampler_fps=round(fps["sample"], 1),
                  train_fps=round(fps["train"], 1),
                  sampler_ratio=round(fps["sample"] / fps["simulate"], 3),
                  train_ratio=round(fps["train"] / fps["simulate"], 3))
    print(json.dumps(result), flush=True)


def bench_modes(obj) -> None:
    from nodes.config import validate
    from nodes.node import Node
    s, modes = obj.sampler, list(obj.bench.modes)
    configs = []
    for mode in modes:  # every scheme checked before the first one runs
        one = copy.deepcopy(obj)
        one.sampler.mode = mode
        validate(one)
        configs.append(one)
    print(f"bench: env={obj.env.name} workers={s.num_workers} envs_per_worker={s.envs_per_worker} "
          f"policy_workers={s.num_policy_workers} rollout={s.rollout} batch={s.batch_size} (async) "
          f"seconds/mode={obj.bench.seconds}, train phase per mode: {', '.join(modes)}", flush=True)
    fps = {}
    for mode, one in zip(modes, configs):
        fps[mode] = Node(one, is_writer=False).measure("train", obj.bench.seconds, obj.bench.warmup_s)
        print(f"{mode:>13}: {fps[mode]:10.1f} env frames/s  ({fps[mode] / fps[modes[0]]:.3f} x {modes[0]})",
              flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)
    print(json.dumps(dict(train_fps={m: round(x, 1) for m, x in fps.items()},
                          ratio_to_first={m: round(x / fps[modes[0]], 3) for m, x in fps.items()})), flush=True)


def _timed_run(obj, run_dir: str, nodes: int) -> dict:
    """Train from scratch for warmup_s + seconds in run_dir; return its summary."""
    from launch.app import write_resolved
    from launch.local import spawn_nodes
    from nodes.node import Node

    obj = copy.deepcopy(obj)
    obj.run_dir, obj.nodes = run_dir, nodes
    obj.train.max_env_frames, obj.train.max_seconds = 0, obj.bench.warmup_s + obj.bench.seconds
    obj.train.checkpoint_every_s = 1e9
    shutil.rmtree(run_dir, ignore_errors=True)
    write_resolved(obj)
    if nodes == 1:
        Node(obj).run()
    elif spawn_nodes(run_dir, nodes) != 0:
        raise SystemExit(f"error: the {nodes}-node benchmark run failed (see the log above)")
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def bench_nodes(obj) -> None:
    n, fs = obj.nodes, obj.env.frameskip
    print(f"bench: {n} local nodes, env={obj.env.name}, per node {obj.sampler.num_workers} workers x "
          f"{obj.sampler.envs_per_worker} envs, {obj.bench.warmup_s + obj.bench.seconds:.0f} s per run", flush=True)
    single = _timed_run(obj, os.path.join(obj.run_dir, "single"), 1)
    print(f"   1 node: {single['fps']:10.1f} env frames/s", flush=True)
    multi = _timed_run(obj, os.path.join(obj.run_dir, "multi"), n)
    per_node = [x * fs / multi["seconds"] for x in multi["samples_per_rank"]]
    print(f"{n:>4} nodes: {multi['fps']:10.1f} env frames/s total, per node "
          f"{', '.join(f'{x:.1f}' for x in per_node)}, sync share per node "
          f"{', '.join(f'{x:.3f}' for x in multi['sync_share_per_rank'])}", flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)
    print(json.dumps(dict(nodes=n, train_fps=multi["fps"], per_node_fps=[round(x, 1) for x in per_node],
                          sync_share=multi["sync_share_per_rank"], single_node_train_fps=single["fps"],
                          scaling=round(multi["fps"] / single["fps"], 3))), flush=True)


if __name__ == "__main__":
    check_command(sys.argv[1:], check)
    main()
