"""`python -m launch.bench [overrides]`: throughput of one layout, three phases in one run.

1. simulate: the rollout workers step their envs with random actions (no inference, no learning);
2. sample:   the full sampler with policy workers, finished trajectories discarded (no learning);
3. train:    the full node, learning.
Each phase runs `bench.warmup_s` then is measured for `bench.seconds`. Frames are env frames
(agent steps x frameskip). The last line printed is one JSON object.

With nodes=N (N > 1) it trains twice for warmup_s + seconds each, once as a single node and once
as N local nodes (launch.spawn.local), and reports the total and per-node training frames/s, each
node's share of time spent waiting in the gradient all-reduce, and the scaling ratio (N-node
total / single node). On one machine the N nodes share its cores; on a cluster, run it per node
count to read scaling.

With bench.modes=[async,sync,deterministic] it measures only the train phase, once per training
scheme (sampler.mode) on the same layout, one after the other, and reports each one's frames/s
and its ratio to the first mode's: the price of a scheme as one number.

Ctrl-C or SIGTERM stops it with one line and exit code 128 + the signal, as launch.train does.
"""
from __future__ import annotations

from launch.process.allocator import preload_tcmalloc

if __name__ == "__main__":  # first, before torch: may start this command again with tcmalloc (the same pid)
    preload_tcmalloc()

import copy
import json
import logging
import os
import shutil
import sys

import hydra

from launch.cli.app import check, hydra_run_dir, resolve
from launch.cli.overrides import check_command
from launch.process.exits import tool_failed

log = logging.getLogger("launch.bench")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    try:
        if obj.bench.soak_s:
            bench_soak(obj)
        elif obj.bench.modes:
            bench_modes(obj)
        elif obj.nodes > 1:
            bench_nodes(obj)
        else:
            bench_node(obj)
    except (Exception, KeyboardInterrupt) as exc:
        code = tool_failed("bench", exc)  # one line (an unexpected error's traceback to the log)
        shutil.rmtree(obj.run_dir, ignore_errors=True)
        sys.exit(code)


MB = 1 << 20


def memory_figures(m) -> dict:
    """A phase's memory (launch.tools.measure.Measured) as the JSON's MB figures."""
    return dict(peak_pss_mb=round(m.memory.pss / MB, 1), peak_rss_sum_mb=round(m.memory.rss / MB, 1),
                processes=m.memory.processes, shared_buffers_mb=round(m.shared_bytes / MB, 1),
                dev_shm_mb=round(m.memory.dev_shm / MB, 1))


def bench_node(obj) -> None:
    from launch.tools.measure import measure
    from nodes.record.profile import format_shares
    s = obj.sampler
    print(f"bench: env={obj.env.name} workers={s.num_workers} envs_per_worker={s.envs_per_worker} "
          f"double_buffered={s.double_buffered} policy_workers={s.num_policy_workers} "
          f"batch={s.batch_size} rollout={s.rollout} seconds/phase={obj.bench.seconds}", flush=True)
    got = {}
    for phase in ("simulate", "sample", "train"):
        got[phase] = m = measure(obj, phase, obj.bench.seconds, obj.bench.warmup_s)
        trained = f" collected, {m.trained_fps:.1f} trained" if phase == "train" else ""
        print(f"{phase:>9}: {m.fps:10.1f} env frames/s{trained}", flush=True)
        for line in format_shares(m.profile):  # where each kind of process spent the measured seconds
            print(f"{'':>11}{line}", flush=True)
        print(f"{'':>11}cpu cores busy: " + ", ".join(f"{k} {x:.2f}" for k, x in m.cores.items()), flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind
    train = got["train"]
    mem = memory_figures(train)
    print(f"   memory: peak {mem['peak_pss_mb']:.0f} MB resident (PSS over {mem['processes']} processes; "
          f"RSS summed {mem['peak_rss_sum_mb']:.0f} MB), shared buffers {mem['shared_buffers_mb']:.0f} MB, "
          f"/dev/shm {mem['dev_shm_mb']:.0f} MB (training)", flush=True)
    fps = {phase: m.fps for phase, m in got.items()}
    result = dict(pure_sim_fps=round(fps["simulate"], 1), sampler_fps=round(fps["sample"], 1),
                  train_fps=round(fps["train"], 1), train_trained_fps=round(got["train"].trained_fps, 1),
                  sampler_ratio=round(fps["sample"] / fps["simulate"], 3),
                  train_ratio=round(fps["train"] / fps["simulate"], 3),
                  profile={phase: m.profile for phase, m in got.items()},
                  cores={phase: m.cores for phase, m in got.items()}, memory=mem)
    print(json.dumps(result), flush=True)


def soak_growth(samples: list[tuple[float, int]], warmup_s: float) -> dict:
    """Memory growth over a soak from (seconds, bytes) samples: the samples after the warm-up, split
    in sixths; the first sixth's highest and lowest against the last sixth's. A node's resident
    memory swings by a fifth within one learner step (its batch and activations come and go), so
    one sample against another says little; a leak lifts both the peaks and the floor."""
    after = [b for t, b in samples if t >= warmup_s]
    n = max(1, len(after) // 6)
    first, last = after[:n], after[-n:]
    out = dict(first_max=max(first), last_max=max(last), first_min=min(first), last_min=min(last))
    out.update(growth=round((out["last_max"] - out["first_max"]) / out["first_max"], 4),
               floor_growth=round((out["last_min"] - out["first_min"]) / out["first_min"], 4))
    return out


def bench_soak(obj) -> None:
    """A real training run for warmup_s + soak_s; the node's memory every 10 s (more often in a
    short one), a line a minute, and how much it grew after the warm-up."""
    from nodes.record.memory import MemoryWatch
    b = obj.bench
    every = min(10.0, max(1.0, (b.warmup_s + b.soak_s) / 20))  # at least 20 samples in a short soak
    print(f"soak: env={obj.env.name}, {b.soak_s / 60:.1f} min after a {b.warmup_s:.0f} s warm-up, memory every "
          f"{every:.0f} s", flush=True)
    watch = MemoryWatch(every_s=every, on_sample=lambda x: x.t % 60 < every and print(
        f"soak: {x.t / 60:5.1f} min  {x.pss / MB:8.1f} MB resident (PSS), {x.processes} processes", flush=True))
    watch.start()
    try:
        summary = _timed_run(obj, os.path.join(obj.run_dir, "soak"), 1, b.warmup_s + b.soak_s)
    finally:
        watch.stop()
    shutil.rmtree(obj.run_dir, ignore_errors=True)
    g = soak_growth([(x.t, x.pss) for x in watch.samples], b.warmup_s)
    print(f"soak: resident (PSS) {g['first_max'] / MB:.1f} MB at most in the first sixth after the warm-up, "
          f"{g['last_max'] / MB:.1f} MB in the last ({g['growth']:+.1%}); lowest {g['first_min'] / MB:.1f} -> "
          f"{g['last_min'] / MB:.1f} MB ({g['floor_growth']:+.1%}); {summary['fps']:.0f} env frames/s, "
          f"{summary['env_frames']} frames", flush=True)
    print(json.dumps(dict(soak_s=b.soak_s, warmup_s=b.warmup_s, train_fps=summary["fps"],
                          env_frames=summary["env_frames"],
                          **{f"pss_{k}_mb" if k.endswith(("max", "min")) else k:
                             round(v / MB, 1) if k.endswith(("max", "min")) else v for k, v in g.items()},
                          samples_mb=[[round(x.t), round(x.pss / MB, 1)] for x in watch.samples])), flush=True)


def bench_modes(obj) -> None:
    from launch.tools.measure import measure
    from nodes.config.validate import validate
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
        fps[mode] = measure(one, "train", obj.bench.seconds, obj.bench.warmup_s).fps
        print(f"{mode:>13}: {fps[mode]:10.1f} env frames/s  ({fps[mode] / fps[modes[0]]:.3f} x {modes[0]})",
              flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)
    print(json.dumps(dict(train_fps={m: round(x, 1) for m, x in fps.items()},
                          ratio_to_first={m: round(x / fps[modes[0]], 3) for m, x in fps.items()})), flush=True)


def _timed_run(obj, run_dir: str, nodes: int, seconds: float | None = None) -> dict:
    """Train from scratch in run_dir for `seconds` (warmup_s + seconds by default); return its summary."""
    from launch.process.resolved import write_resolved
    from launch.spawn.local import spawn_nodes
    from nodes.node import Node

    obj = copy.deepcopy(obj)
    obj.run_dir, obj.nodes = run_dir, nodes
    obj.train.max_env_frames, obj.train.max_seconds = 0, seconds or obj.bench.warmup_s + obj.bench.seconds
    obj.train.checkpoint_every_s = 1e9
    shutil.rmtree(run_dir, ignore_errors=True)
    write_resolved(obj)
    if nodes == 1:
        Node(obj).run()
    elif spawn_nodes(obj) != 0:
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
    # an iteration = one version; its sync = each rank's all-reduce time (transfer + waiting for the
    # last rank to arrive: the rank arriving last waits least, so the minimum is nearest the transfer)
    iteration_s = multi["train_seconds"] / max(multi["policy_version"], 1)
    sync_s = [share * iteration_s for share in multi["sync_share_per_rank"]]
    print(f"{n:>4} nodes: {multi['fps']:10.1f} env frames/s total, per node "
          f"{', '.join(f'{x:.1f}' for x in per_node)}, sync share per node "
          f"{', '.join(f'{x:.3f}' for x in multi['sync_share_per_rank'])}", flush=True)
    print(f"      iteration {iteration_s:.3f} s ({multi['policy_version']} in {multi['train_seconds']:.1f} s), "
          f"sync per iteration per node {', '.join(f'{x:.3f}' for x in sync_s)} s", flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)
    print(json.dumps(dict(nodes=n, train_fps=multi["fps"], per_node_fps=[round(x, 1) for x in per_node],
                          sync_share=multi["sync_share_per_rank"], single_node_train_fps=single["fps"],
                          scaling=round(multi["fps"] / single["fps"], 3), iteration_s=round(iteration_s, 4),
                          sync_s_per_iteration=[round(x, 4) for x in sync_s])), flush=True)


if __name__ == "__main__":
    sys.argv[1:] = check_command(sys.argv[1:], check)  # what Hydra's app reads: 1e6 as 1000000 for an int key
    main()
