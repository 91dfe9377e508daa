"""`python -m launch.scaling [overrides]`: the cluster on paper.

A 2-core machine cannot show many-node speed-ups, so this measures what decides them and models
the rest. env=, model=, sampler.* pick the model and the batch, as for launch.train.

1. learner: one iteration on this CPU as a node's learner runs it: the real model and
   Learner.train_step on a synthetic batch of the configured shape (batch_size / rollout
   trajectories of `rollout` steps, random observations of the env's shape; in sampler.mode=sync
   or deterministic one rollout of every env), in this process with train.learner_threads or this
   process's cores; WARMUP steps, then the median of bench.scaling_steps. One more step runs
   under torch's FlopCounterMode: its matmul and convolution FLOPs, forward and backward.
2. all-reduce: gloo groups of bench.scaling_ranks local ranks on 127.0.0.1 (torch.multiprocessing
   spawn; sync.dist_peers.DistPeers, as the nodes use it) time a flat float32 all-reduce of the
   gradient buffer's size (the gradient, the running norms' moments, the sample count and the stop
   vote), of 1/64, 1/8 and 4x that, and of TINY_FLOATS floats (the
   latency of the small per-iteration collectives): WARMUP of each, then bench.scaling_repeats,
   each after a 1-float all-reduce that lines the ranks up (the barrier); the slowest rank's time,
   the median over the repeats.
3. fit: the ring all-reduce t(p, n) = 2(p-1) alpha + 2(p-1)/p n beta (n bytes), least squares on
   the relative residuals (each point weighted by 1/t, so latency points count as much as
   bandwidth ones).
4. prediction for NODES x LINKS_GBPS, with the CPU iteration of 1 and the GPU iteration given
   (bench.gpu_iteration_s, measured on a GPU node; the same at every node's share): sync per
   iteration = the gradient all-reduce (with the running norms' moments, the sample count and the
   stop votes in the same buffer) + the stats-row all-gather every sync.stats_every iterations +
   the checksum all-gather every sync.check_every iterations (both amortised), each with the ring's
   latency and bandwidth terms, where alpha = the gloo software latency fitted in 3 +
   LINK_LATENCY_S of the link, and beta = 8 / (link bits per s).
   The gradient all-reduce follows the backward (never overlapped with it), so sync share =
   sync / (iteration + sync) and efficiency = iteration / (iteration + sync), as if the learner
   were the node's bottleneck.

The roles live apart: launch.tools.scaling_harness measures 1 and 2, launch.tools.scaling_model fits 3 and
predicts 4 (pure), launch.tools.scaling_report prints; this module is the command (checks, signals, the
order of the steps).

The ring's latency term grows linearly in the nodes; NCCL uses trees at that scale, so at 256 nodes
this model is pessimistic for latency. The last line printed is one JSON object. Bad values are
refused with one line (exit code 2) before any process starts; Ctrl-C or SIGTERM stops it with one
line and exit code 128 + the signal, leaving no process and no run directory behind.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable

import hydra

from launch.cli.app import check as check_config
from launch.cli.app import hydra_run_dir, resolve
from launch.cli.overrides import check_command
from launch.process.exits import refuse, tool_failed
from launch.tools import scaling_report as report
from launch.tools.scaling_harness import allreduce_sizes, batch_shape, measure_allreduce, measure_learner
from launch.tools.scaling_model import NODES, fit_ring, link_beta, predict, ring_allreduce_s
from nodes.config.layout import in_rounds, node_batch_size, splits_batch
from nodes.errors import ConfigError, Stopped, need


def check_scaling(cfg) -> None:
    """What launch.scaling needs beyond launch.cli.app's checks (ConfigError, one line)."""
    need(cfg.nodes == 1, f"launch.scaling predicts {', '.join(map(str, NODES))} nodes from measurements on this "
                         f"machine: leave nodes=1, got nodes={cfg.nodes}")
    need(cfg.launcher.name == "local", "launch.scaling measures this machine: use launcher=local")
    need(cfg.train.device == "cpu", "launch.scaling measures the learner on this CPU (a GPU's iteration is "
                                    f"bench.gpu_iteration_s): use train.device=cpu, got '{cfg.train.device}'")
    if cfg.bench.scaling_links:
        from launch.spawn import hosts
        for link in cfg.bench.scaling_links:
            hosts.parse_rate(link)
        hosts.check_machine(max(cfg.bench.scaling_ranks), "bench.scaling_links", "max(bench.scaling_ranks)")
    need(not in_rounds(cfg.sampler) or cfg.sampler.num_workers != "auto",
         f"sampler.mode={cfg.sampler.mode}: a batch is one rollout of every env, so launch.scaling needs a number "
         "for sampler.num_workers, not auto")


def check(cfg) -> None:
    """Every check of a composed point before anything starts: ours, then launch.cli.app's."""
    check_scaling(cfg)
    check_config(cfg)


def _stop(signum, frame) -> None:
    raise Stopped(signum)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())  # launch.cli.app's checks
    try:
        check_scaling(obj)
    except ConfigError as exc:
        shutil.rmtree(obj.run_dir, ignore_errors=True)
        refuse(str(exc))
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        scaling(obj)
    except (Exception, KeyboardInterrupt) as exc:
        code = tool_failed("scaling", exc)  # one line (an unexpected error's traceback to the log)
        sys.exit(code)
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind


def scaling(obj) -> None:
    """Steps 1 to 4 in order, each printed as it ends; the JSON line last."""
    b = obj.bench
    ranks = sorted(set(b.scaling_ranks))
    n, t = batch_shape(obj)
    cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    report.print_header(obj, ranks, n, t, cores, load)
    lf = measure_learner(obj)
    report.print_learner(lf)
    cpu_batch, cpu_at = split_batches(obj, n * t, lf.iteration_s)
    gpu_batch = node_batches(obj, n * t, "cuda")
    sizes = allreduce_sizes(lf.traffic.grad_bytes // 4)  # the whole buffer the nodes all-reduce
    measured = measure_allreduce(ranks, [f for _, f in sizes], b.scaling_repeats, obj.sync)
    points = [(p, 4 * f, sec) for p in ranks for (_, f), sec in zip(sizes, measured[p])]
    # ranks beyond the cores take turns on them: their latency is this machine's oversubscription,
    # not gloo's, so the model is fitted to the rank counts that fit in the cores (all if none do)
    fit = fit_ring([x for x in points if x[0] <= cores] or points)
    alone = {p: fit_ring([x for x in points if x[0] == p]).alpha_s for p in ranks} if len(ranks) > 1 else {}
    report.print_allreduce(ranks, sizes, measured, fit, alone, b.scaling_repeats, cores)
    split = [d for d, at in (("CPU", cpu_batch), ("GPU", gpu_batch)) if at(max(NODES)) != n * t]
    report.print_model(lf, fit, b.gpu_iteration_s, split)
    # a GPU's iteration does not shrink with the node's share: it is bound by kernel launches, so
    # a small share takes about as long as the whole batch (docs/gpu.md)
    rows = (predict({"cpu": cpu_at.__getitem__}, lf.traffic, fit.alpha_s, cpu_batch)
            + predict({"gpu": lambda samples: b.gpu_iteration_s}, lf.traffic, fit.alpha_s, gpu_batch))
    report.print_predicted(rows)
    links = [on_link(link, ranks, sizes, b.scaling_repeats, obj.sync, fit) for link in b.scaling_links]
    for link in links:
        report.print_link(link)
    report.print_result(load, cores, lf, points, fit, alone, b.gpu_iteration_s, rows, links, cpu_at)


def node_batches(obj, batch: int, device: str) -> Callable[[int], int]:
    """Each node's batch in samples on p nodes computing on `device`: its share of the world's
    `batch` (nodes.config.layout.node_batch_size) where sync.global_batch splits it on that device
    (nodes.config.layout.splits_batch: auto on CPUs, not on GPUs) and not in rounds, else the whole batch."""
    if splits_batch(obj.sync.global_batch, device) and not in_rounds(obj.sampler):
        return lambda p: node_batch_size(obj.sampler, p, True)
    return lambda p: batch


def split_batches(obj, batch: int, iteration_s: float) -> tuple[Callable[[int], int], dict[int, float]]:
    """Each CPU node's batch in samples on p nodes (node_batches), and the CPU learner's iteration
    at each of those batches (measured here, the configured one's given): one learner measurement
    more for each share the predicted node counts give."""
    node_batch = node_batches(obj, batch, "cpu")
    iterations = {batch: iteration_s}
    for samples in sorted({node_batch(p) for p in NODES} - set(iterations), reverse=True):
        lf = measure_learner(obj, samples // obj.sampler.rollout)
        report.print_learner(lf)
        iterations[samples] = lf.iteration_s
    return node_batch, iterations


def on_link(link: str, ranks: list[int], sizes: list[tuple[str, int]], repeats: int, sync_cfg, fit) -> dict:
    """The all-reduces again on emulated hosts whose links are shaped to `link`, one rank per host,
    each against the model: ring_allreduce_s with the loopback's fitted latency and the link's
    bandwidth (as `predict` has it, with no link latency: a veth adds none), and with the slower
    of the link and the loopback's own per-byte cost (the software's copies and sums, which gloo
    overlaps with the sends: on a fast link they are the bottleneck)."""
    from launch.spawn.hosts import Network, parse_rate

    bits = parse_rate(link)
    with Network(max(ranks), bits) as net:
        measured = measure_allreduce(ranks, [f for _, f in sizes], repeats, sync_cfg, network=net)
    beta = link_beta(bits / 1e9)
    rows = []
    for p in ranks:
        for (label, floats), sec in zip(sizes, measured[p]):
            model = ring_allreduce_s(p, 4 * floats, fit.alpha_s, beta)
            slower = ring_allreduce_s(p, 4 * floats, fit.alpha_s, max(beta, fit.beta_s_per_byte))
            rows.append(dict(ranks=p, size=label, bytes=4 * floats, seconds=sec, model_s=model,
                             model_error=model / sec - 1, bottleneck_s=slower, bottleneck_error=slower / sec - 1))
    return dict(link=link, bits_per_s=bits, rows=rows)


if __name__ == "__main__":
    sys.argv[1:] = check_command(sys.argv[1:], check)  # what Hydra's app reads: 1e6 as 1000000 for an int key
    main()
