"""What launch.scaling prints: tables for a reader while it measures, then, last, one JSON line for a program.

It formats what launch.tools.scaling_harness measured and launch.tools.scaling_model fitted and predicted, and
states the model's assumptions beside them; it computes nothing of the model itself. The JSON's
floats keep 4 significant digits (`_sig`); its keys are what tests/test_scaling.py and docs/benchmarks.md's
figures read, so a change to them is a change of the command's output.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from launch.tools.scaling_harness import LearnerFigures
from launch.tools.scaling_model import (
    LINK_CLASS,
    LINK_LATENCY_S,
    LINKS_GBPS,
    NCCL_STEP_LATENCY_S,
    RingFit,
    ring_allreduce_s,
)


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def print_header(obj, ranks: list[int], n: int, t: int, cores: int, load: float) -> None:
    """What is measured, on what batch, and how busy the cores were before."""
    b = obj.bench
    print(f"scaling: env={obj.env.name} model={obj.model.name} batch={n * t} ({n} trajectories x {t} steps); "
          f"learner: median of {b.scaling_steps} steps; all-reduce: gloo groups of {', '.join(map(str, ranks))} "
          f"local ranks, median of {b.scaling_repeats}; load average {load:.2f} on {cores} cores before", flush=True)
    if load > 0.5:
        print("  note: other processes are using the cores: the times below include waiting for them (a learner "
              "with several threads suffers most: each parallel region waits for its slowest thread)", flush=True)


def print_learner(lf: LearnerFigures) -> None:
    print(f"  learner, batch {lf.trajectories * lf.rollout}: {lf.iteration_s * 1e3:.1f} ms per iteration on this "
          f"CPU ({lf.threads} threads; steps "
          f"{min(lf.steps_s) * 1e3:.1f} to {max(lf.steps_s) * 1e3:.1f} ms), {lf.flops / 1e9:.2f} GFLOP (matmuls "
          f"and convolutions, forward and backward), {lf.gradient_elements:,} gradient elements", flush=True)


def print_allreduce(ranks, sizes, measured, fit: RingFit, alone: dict[int, float], repeats: int, cores: int) -> None:
    """The measured table (ranks x bytes -> ms, the fit's value beside each) and the fit."""
    def model(p, nbytes):
        return ring_allreduce_s(p, nbytes, fit.alpha_s, fit.beta_s_per_byte)

    fitted = [p for p in ranks if p <= cores] or ranks  # what the fit saw (main)
    print(f"  all-reduce over gloo on 127.0.0.1, ms (median of {repeats}, slowest rank; [ring fit]):")
    print(f"  {'bytes':>12}  {'tensor':<13}" + "".join(f"{f'{p} ranks':>20}" for p in ranks))
    for i, (label, f) in enumerate(sizes):
        cells = "".join(f"{measured[p][i] * 1e3:>11.3f} [{model(p, 4 * f) * 1e3:>6.3g}]" for p in ranks)
        print(f"  {4 * f:>12,}  {label:<13}{cells}")
    points = [(p, 4 * f, measured[p][i]) for p in fitted for i, (_, f) in enumerate(sizes)]
    worst = max(points, key=lambda x: abs(model(x[0], x[1]) - x[2]) / x[2])
    print(f"  ring fit to {', '.join(map(str, fitted))} ranks: alpha {fit.alpha_s * 1e6:.1f} us per step (gloo's "
          "software latency here), beta "
          f"{fit.gbytes_per_s:.2f} GB/s effective (loopback copies and sums on this CPU); worst relative residual "
          f"{fit.worst_rel_residual:.0%} ({worst[0]} ranks, {_bytes(worst[1])})")
    if alone:
        print("  alpha fitted to each rank count alone: " + ", ".join(f"{p} ranks {a * 1e6:.1f} us"
                                                                       for p, a in alone.items()))
    if max(ranks) > cores:
        print(f"  note: {max(ranks)} ranks share this machine's {cores} cores, so their times include waiting "
              "for a core")


def print_model(lf: LearnerFigures, fit: RingFit, gpu_iteration_s: float, split: Sequence[str] = ()) -> None:
    """What each node sends, what is assumed, and what the model leaves out. split: the devices
    ("CPU", "GPU") whose rows split the world's batch (sync.global_batch)."""
    tr = lf.traffic
    if split:
        print(f"  sync.global_batch: {' and '.join(split)} nodes each learn on their share of the world's batch (the "
              "table's batch column; auto, the default: CPU nodes only), the CPU iteration measured at each share "
              "above; the GPU iteration the same at every share (bound by kernel launches, as measured on an H100)")
    print(f"  per iteration and node: gradient all-reduce {_bytes(tr.grad_bytes)} (with the running-norm "
          f"moments); stats row {tr.stats_row_bytes} B per rank every "
          f"{tr.stats_every} iterations (all-gather); checksum {tr.checksum_bytes} B every {tr.check_every} "
          "iterations (all-gather)")
    print(f"  assumed: GPU iteration {gpu_iteration_s * 1e3:.1f} ms (bench.gpu_iteration_s: this model's "
          f"{lf.flops / 1e9:.1f} GFLOP at {lf.flops / gpu_iteration_s / 1e12:.1f} TFLOP/s achieved)")
    latency = ", ".join(f"{g:g} Gb/s {LINK_LATENCY_S[g] * 1e6:g} us ({LINK_CLASS[g]}-class)" for g in LINKS_GBPS)
    print(f"  assumed: link latency per ring step {latency}, added to the {fit.alpha_s * 1e6:.1f} us measured "
          f"(gloo; GPU rows: NCCL's {NCCL_STEP_LATENCY_S * 1e6:g} us per step, assumed, for the gradient, "
          "gloo's for the all-gathers); beta = 8 / link bits per second")
    print("  model: ring all-reduce, whose latency term 2(p-1) alpha grows linearly with the nodes (pessimistic "
          "at 256 nodes, where NCCL would use trees); the gradient all-reduce runs after the backward, not "
          "overlapped with it; efficiency as if the learner were the node's bottleneck")
    local_gbps = 8 * fit.gbytes_per_s
    faster = [g for g in LINKS_GBPS if g > local_gbps]
    if faster:
        print(f"  note: gloo moved {local_gbps:.1f} Gb/s between local ranks here; on {', '.join(map(str, faster))} "
              "Gb/s links a CPU node's copies and sums, not the link, may bound it (the table uses the link's rate)")
    sys.stdout.flush()


def print_predicted(rows: list[dict]) -> None:
    print("  predicted per iteration:")
    print(f"  {'iteration':<24}{'nodes':>6}{'batch':>7}{'link':>10}{'alpha':>10}{'sync':>11}{'share':>8}"
          f"{'efficiency':>12}{'speed-up':>10}")
    for r in rows:
        what = f"{r['device']} {r['iteration_s'] * 1e3:.1f} ms ({'measured' if r['device'] == 'cpu' else 'assumed'})"
        print(f"  {what:<24}{r['nodes']:>6}{r['node_batch']:>7}{r['link_gbps']:>5} Gb/s{r['alpha_s'] * 1e6:>7.1f} us"
              f"{r['sync_s'] * 1e3:>8.2f} ms{r['sync_share']:>8.3f}{r['efficiency']:>12.3f}{r['speedup']:>10.1f}")
    sys.stdout.flush()


def print_link(link: dict) -> None:
    """launch.scaling.on_link's rows: measured on emulated hosts against the two models."""
    print(f"  all-reduce on emulated hosts, every link {link['link']} (median of the repeats, slowest rank):")
    print(f"  {'ranks':>5}  {'size':<12}{'bytes':>10}{'measured':>12}{'model':>11}{'error':>8}"
          f"{'bottleneck':>11}{'error':>8}")
    for r in link["rows"]:
        print(f"  {r['ranks']:>5}  {r['size']:<12}{_bytes(r['bytes']):>10}{r['seconds'] * 1e3:>9.2f} ms"
              f"{r['model_s'] * 1e3:>8.2f} ms{r['model_error']:>+8.1%}{r['bottleneck_s'] * 1e3:>8.2f} ms"
              f"{r['bottleneck_error']:>+8.1%}")
    sys.stdout.flush()


def print_result(load: float, cores: int, lf: LearnerFigures, points: list[tuple[int, int, float]], fit: RingFit,
                 alone: dict[int, float], gpu_iteration_s: float, rows: list[dict], links: list[dict] = (),
                 cpu_at: dict[int, float] | None = None) -> None:
    """The last line: every figure above as one JSON object (cpu_at: the CPU iteration by node batch)."""
    print(json.dumps(dict(
        load_average=round(load, 2), cores=cores,
        learner=dict(iteration_s=_sig(lf.iteration_s), steps_s=[_sig(x) for x in lf.steps_s], threads=lf.threads,
                     trajectories=lf.trajectories, rollout=lf.rollout, gradient_elements=lf.gradient_elements,
                     allreduce_bytes=lf.traffic.grad_bytes,
                     flops=lf.flops,
                     iteration_s_by_batch={str(k): _sig(v) for k, v in sorted((cpu_at or {}).items())}),
        allreduce=[dict(ranks=p, bytes=nbytes, seconds=_sig(sec)) for p, nbytes, sec in points],
        fit=dict(alpha_us=_sig(fit.alpha_s * 1e6), beta_gbytes_per_s=_sig(fit.gbytes_per_s),
                 worst_rel_residual=_sig(fit.worst_rel_residual, 3),
                 alpha_us_by_ranks={str(p): _sig(a * 1e6) for p, a in alone.items()}),
        assumptions=dict(gpu_iteration_s=gpu_iteration_s,
                         link_latency_us={str(g): LINK_LATENCY_S[g] * 1e6 for g in LINKS_GBPS},
                         nccl_step_latency_us=NCCL_STEP_LATENCY_S * 1e6, model="ring"),
        traffic=asdict(lf.traffic),
        predicted=[{k: _sig(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows],
        links=[dict(link=x["link"], rows=[{k: _sig(v) if isinstance(v, float) else v for k, v in r.items()}
                                          for r in x["rows"]]) for x in links])), flush=True)

