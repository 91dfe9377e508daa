"""`python -m launch.limit [overrides]`: how far the node trains from what this CPU can do.

1. kernels: the sustained rate of a large matmul and a large convolution, fp32 and bf16, on every
   core (launch.tools.limit_harness.kernel_rates; each timed for a quarter of bench.seconds, at most
   KERNEL_S);
2. model: its matmul and convolution FLOPs per agent step in inference and per sample in learning
   (FlopCounterMode on the real model and Learner.train_step; the learner's step timed alone, as
   launch.scaling does);
3. simulate: the rollout workers alone with random actions (launch.bench's first phase): env
   frames/s and the cores they kept busy, so the simulation's core-seconds per frame;
4. train: the whole node learning (launch.bench's third phase): env frames/s, and where each kind
   of process spent its time.

The limit is the frames/s if every core did only useful work: per env frame, the simulation's
core-seconds plus the model's FLOPs (inference + learning, per agent step / frameskip) at the best
kernel's rate in the precision the node trains in (train.precision, auto: bf16 on CPUs with bf16
units), spread over the cores. Efficiency = trained frames/s / limit. The limit counts no copies,
no queues, no Python, no idle core and no kernel slower than the best one: the node can approach
it, not pass it. CPU nodes only (a GPU node's limit, simulation on the CPU against arithmetic on
the GPU, has not been built: no GPU has been lent to measure it on). The last line printed is one
JSON object; bad values are refused in one line before anything starts; Ctrl-C stops it with one
line and exit code 130.
"""
from __future__ import annotations

from launch.process.allocator import preload_tcmalloc

if __name__ == "__main__":  # first, before torch: may start this command again with tcmalloc (the same pid)
    preload_tcmalloc()

import json
import os
import shutil
import sys

import hydra

from launch.cli.app import check as check_config
from launch.cli.app import hydra_run_dir, resolve
from launch.cli.overrides import check_command
from launch.process.exits import refuse, tool_failed
from nodes.errors import ConfigError, need

KERNEL_S = 1.5  # each kernel's timing: a quarter of bench.seconds, at most this


def check_limit(cfg) -> None:
    need(cfg.nodes == 1, f"launch.limit measures one node on this machine: leave nodes=1, got nodes={cfg.nodes}")
    need(cfg.launcher.name == "local", "launch.limit measures this machine: use launcher=local")
    need(cfg.train.device == "cpu", "launch.limit measures a CPU node (a GPU node's limit is not built yet): "
                                    f"use train.device=cpu, got '{cfg.train.device}'")


def check(cfg) -> None:
    check_limit(cfg)
    check_config(cfg)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    try:
        check_limit(obj)
    except ConfigError as exc:
        shutil.rmtree(obj.run_dir, ignore_errors=True)
        refuse(str(exc))
    try:
        node_limit(obj)
    except (Exception, KeyboardInterrupt) as exc:
        code = tool_failed("limit", exc)  # one line (an unexpected error's traceback to the log)
        sys.exit(code)
    finally:
        shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind


def node_limit(obj) -> None:
    from launch.tools.limit_harness import kernel_rates, limit, model_flops
    from launch.tools.measure import measure
    from nodes.record.profile import format_shares
    from nodes.sampling.placement import choose_precision, has_fast_bf16

    s, b = obj.sampler, obj.bench
    cores = len(os.sched_getaffinity(0))
    precision = choose_precision(obj.train.precision, ["cpu"], has_fast_bf16)
    print(f"limit: env={obj.env.name} model={obj.model.name} workers={s.num_workers} envs_per_worker="
          f"{s.envs_per_worker} batch={s.batch_size} precision={precision}; {cores} cores, load average "
          f"{os.getloadavg()[0]:.2f} before; phases of {b.seconds:.0f} s after {b.warmup_s:.0f} s", flush=True)
    rates = kernel_rates(cores, min(KERNEL_S, b.seconds / 4))
    for kind, by in rates.items():
        print(f"  {kind:>6}: " + ", ".join(f"{p} {g:,.0f} GFLOP/s" for p, g in by.items()), flush=True)
    best = max(by[precision] for by in rates.values())
    flops = model_flops(obj)
    learner_rate = flops.learning_per_sample * flops.learner_samples / flops.learner_step_s / 1e9
    print(f"   model: {flops.inference_per_step / 1e6:.1f} MFLOP per agent step in inference, "
          f"{flops.learning_per_sample / 1e6:.1f} MFLOP per sample in learning; the learner's step alone "
          f"{flops.learner_step_s * 1e3:.0f} ms on {flops.learner_samples} samples ({learner_rate:,.0f} GFLOP/s, "
          f"{learner_rate / best:.0%} of the best kernel's {best:,.0f})", flush=True)
    sim = measure(obj, "simulate", b.seconds, b.warmup_s)
    sim_cores = sum(sim.cores.values())
    print(f"simulate: {sim.fps:,.0f} env frames/s on {sim_cores:.2f} busy cores", flush=True)
    train = measure(obj, "train", b.seconds, b.warmup_s)
    print(f"   train: {train.trained_fps:,.0f} env frames/s trained; cores busy: "
          + ", ".join(f"{k} {x:.2f}" for k, x in train.cores.items()), flush=True)
    for line in format_shares(train.profile):
        print(f"{'':>11}{line}", flush=True)
    lim = limit(cores, sim.fps, sim_cores, flops, obj.env.frameskip, best)
    eff = train.trained_fps / lim.fps
    print(f"   limit: per env frame {lim.sim_core_s * 1e6:.1f} core-us of simulation + "
          f"{lim.flops_per_frame / 1e6:.2f} MFLOP at {best:,.0f} GFLOP/s ({lim.arithmetic_core_s * 1e6:.1f} core-us) "
          f"-> {lim.fps:,.0f} env frames/s on {cores} cores; trained {train.trained_fps:,.0f}: "
          f"efficiency {eff:.3f}", flush=True)
    print(json.dumps(dict(env=obj.env.name, cores=cores, precision=precision, kernel_gflops=rates,
                          best_gflops=round(best, 1), inference_flops_per_step=round(flops.inference_per_step),
                          learning_flops_per_sample=round(flops.learning_per_sample),
                          learner_step_s=round(flops.learner_step_s, 4), learner_gflops=round(learner_rate, 1),
                          flops_per_frame=round(lim.flops_per_frame), sim_fps=round(sim.fps, 1),
                          sim_cores=round(sim_cores, 2), sim_core_us_per_frame=round(lim.sim_core_s * 1e6, 2),
                          arithmetic_core_us_per_frame=round(lim.arithmetic_core_s * 1e6, 2),
                          limit_fps=round(lim.fps, 1), train_fps=round(train.trained_fps, 1),
                          efficiency=round(eff, 4), train_profile=train.profile, train_cores=train.cores)),
          flush=True)


if __name__ == "__main__":
    sys.argv[1:] = check_command(sys.argv[1:], check)  # what Hydra's app reads: 1e6 as 1000000 for an int key
    main()
