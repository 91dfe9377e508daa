"""launch.scaling: the ring model's fit recovers known latency and bandwidth, its predictions move the
right way with nodes and links, a short real run prints the predicted table, and bad values are
refused with one line before any process starts."""
import itertools
import json

import pytest
from helpers import one_error_line, run_module

from launch.tools.scaling_model import (
    LINKS_GBPS,
    NODES,
    Traffic,
    fit_ring,
    link_beta,
    predict,
    ring_allgather_s,
    ring_allreduce_s,
    sync_times,
)

ALPHA, BETA = 40e-6, 1 / 2.5e9  # 40 us per step, 2.5 GB/s


def test_ring_terms():
    assert ring_allreduce_s(2, 1000, ALPHA, BETA) == pytest.approx(2 * ALPHA + 1000 * BETA)
    assert ring_allreduce_s(8, 0, ALPHA, BETA) == pytest.approx(14 * ALPHA)
    # the latency term grows linearly in the nodes, the bandwidth term tends to 2 n beta
    assert ring_allreduce_s(256, 0, ALPHA, BETA) / ring_allreduce_s(8, 0, ALPHA, BETA) == pytest.approx(255 / 7)
    assert ring_allreduce_s(10**6, 1e9, 0, BETA) == pytest.approx(2e9 * BETA, rel=1e-5)
    assert ring_allgather_s(4, 64, ALPHA, BETA) == pytest.approx(3 * ALPHA + 3 * 64 * BETA)
    assert link_beta(10) == pytest.approx(8e-10)  # 10 Gb/s = 1.25 GB/s


def test_fit_recovers_known_alpha_and_beta():
    points = [(p, n, ring_allreduce_s(p, n, ALPHA, BETA))
              for p, n in itertools.product((2, 4, 8), (64, 30_000, 250_000, 2_000_000, 8_000_000))]
    fit = fit_ring(points)
    assert fit.alpha_s == pytest.approx(ALPHA, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)
    assert fit.gbytes_per_s == pytest.approx(2.5, rel=1e-6)
    assert fit.worst_rel_residual < 1e-6
    # one rank count is enough: 2(p-1) alpha is then the intercept, 2(p-1)/p beta the slope
    alone = fit_ring([x for x in points if x[0] == 2])
    assert alone.alpha_s == pytest.approx(ALPHA, rel=1e-6) and alone.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)


def test_fit_stays_non_negative_and_reports_its_worst_residual():
    # pure bandwidth measured with a little noise: an unconstrained fit would give alpha < 0
    points = [(2, n, n * BETA * f) for n, f in ((1e3, 0.5), (1e6, 1.0), (1e7, 1.02))]
    fit = fit_ring(points)
    assert fit.alpha_s == 0 and fit.beta_s_per_byte > 0
    assert fit.worst_rel_residual == pytest.approx(max(abs(n * fit.beta_s_per_byte - t) / t for _, n, t in points))
    with pytest.raises(ValueError):
        fit_ring([(2, 100, 1e-3)])


def test_efficiency_falls_with_nodes_and_rises_with_bandwidth():
    traffic = Traffic(grad_bytes=4 * (2_871_526 + 55_297), stats_row_bytes=64)
    rows = predict({"cpu": 1.5, "gpu": 0.01}, traffic, software_alpha_s=50e-6)
    assert len(rows) == 2 * len(NODES) * len(LINKS_GBPS)
    table = {(r["device"], r["nodes"], r["link_gbps"]): r for r in rows}
    for r in rows:
        assert r["sync_share"] + r["efficiency"] == pytest.approx(1)
        assert r["sync_s"] == pytest.approx(r["allreduce_s"] + r["small_s"])
        assert r["speedup"] == pytest.approx(r["nodes"] * r["efficiency"])
    for device in ("cpu", "gpu"):
        for gbps in LINKS_GBPS:
            eff = [table[device, p, gbps]["efficiency"] for p in NODES]
            assert eff == sorted(eff, reverse=True) and len(set(eff)) == len(eff), (device, gbps, eff)
        for p in NODES:
            eff = [table[device, p, g]["efficiency"] for g in LINKS_GBPS]
            assert eff == sorted(eff) and len(set(eff)) == len(eff), (device, p, eff)
    # GPU rows: NCCL's lower latency for the gradient, yet the faster iteration pays a larger share
    for p, g in itertools.product(NODES, LINKS_GBPS):
        assert table["gpu", p, g]["sync_s"] < table["cpu", p, g]["sync_s"]
        assert table["gpu", p, g]["efficiency"] < table["cpu", p, g]["efficiency"]


def test_with_the_split_each_node_learns_on_its_share_and_the_speedup_counts_samples():
    """sync.global_batch: p nodes each learn on node_batch(p) samples; the iteration is the one at that
    batch, and the speed-up is the world's samples per second over one node's at the whole batch."""
    traffic = Traffic(grad_bytes=4 * 100_000, stats_row_bytes=64)
    at = {1024: 0.8, 128: 0.15, 32: 0.06}.__getitem__
    share = {1: 1024, 8: 128, 64: 32}.__getitem__
    rows = predict({"cpu": at}, traffic, software_alpha_s=50e-6, node_batch=share, nodes=(8, 64), links_gbps=(10,))
    whole = predict({"cpu": 0.8}, traffic, software_alpha_s=50e-6, nodes=(8, 64), links_gbps=(10,))
    for r, w in zip(rows, whole):
        assert r["node_batch"] == share(r["nodes"]) and r["iteration_s"] == at(r["node_batch"])
        assert r["sync_s"] == w["sync_s"]  # the same gradient, whatever the batch
        samples_per_s = r["nodes"] * r["node_batch"] / (r["iteration_s"] + r["sync_s"])
        assert r["speedup"] == pytest.approx(samples_per_s / (1024 / 0.8))
        assert r["sync_share"] > w["sync_share"] and r["speedup"] < w["speedup"]  # shorter iterations, same sync
        assert w["node_batch"] is None and w["speedup"] == pytest.approx(w["nodes"] * w["efficiency"])


def test_the_stats_gather_every_k_iterations_costs_a_kth_of_its_latency():
    """The all-gather's latency term grows with every rank: gathered every k-th iteration, the
    small collectives' time at 256 nodes falls by (k - 1) / k of the gather's share, nothing else moves."""
    every = {k: Traffic(grad_bytes=4 * (2_871_526 + 55_297), stats_row_bytes=56, stats_every=k)
             for k in (1, 10)}
    alpha, beta = 150e-6, 1 / 2e9
    (g1, s1), (g10, s10) = (sync_times(256, every[k], alpha, beta) for k in (1, 10))
    gather = ring_allgather_s(256, 56, alpha, beta)
    assert g1 == g10 and s1 - s10 == pytest.approx(gather * 0.9)
    assert gather > 0.03  # 255 ring steps of 150 us: more than a GPU iteration


def test_a_short_real_run_prints_the_predicted_table(tmp_path):
    # one learner thread: with the cores busy (the rest of the suite), a 2-thread step waits on each
    # parallel region's slower thread and can take 100x longer
    proc = run_module("launch.scaling", f"hydra.run.dir={tmp_path}/s", "env=gym", "env.id=CartPole-v1", "model=mlp",
                      "sampler.batch_size=256", "train.learner_threads=1", "bench.scaling_ranks=[2]",
                      "bench.scaling_repeats=3", "bench.scaling_steps=2", "bench.scaling_links=[200mbit]",
                      timeout=120)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    learner = result["learner"]
    assert learner["iteration_s"] > 0 and learner["trajectories"] == 8 and learner["rollout"] == 32
    assert learner["threads"] == 1
    assert learner["flops"] > 0 and learner["gradient_elements"] > 0
    measured = result["allreduce"]
    assert {m["ranks"] for m in measured} == {2} and len(measured) == 5
    assert all(m["seconds"] > 0 for m in measured)
    # the buffer the nodes all-reduce: the gradient, then the moments of the CartPole observation
    # (1 + 2 x 4 floats) and of the returns (1 + 2), the sample count and the stop vote
    assert learner["allreduce_bytes"] == 4 * (learner["gradient_elements"] + 9 + 3 + 2)
    assert {m["bytes"] for m in measured} >= {64, learner["allreduce_bytes"]}
    assert result["fit"]["alpha_us"] >= 0 and result["fit"]["beta_gbytes_per_s"] > 0
    assert result["assumptions"]["gpu_iteration_s"] == 0.045
    # sync.global_batch=auto (the default): CPU nodes split the world's batch, 8, 64 and 256 nodes
    # each learning on one rollout of 32 (256 // p, at least one rollout), measured apart; GPU nodes
    # learn on the whole batch, their iteration the same at any batch (launch-bound)
    by_batch = learner["iteration_s_by_batch"]
    assert set(by_batch) == {"256", "32"} and by_batch["256"] == learner["iteration_s"] and by_batch["32"] > 0
    predicted = result["predicted"]
    assert {r["node_batch"] for r in predicted if r["device"] == "cpu"} == {32}
    assert {r["node_batch"] for r in predicted if r["device"] == "gpu"} == {256}
    assert all(r["speedup"] == pytest.approx(r["nodes"] * r["efficiency"], rel=0.01) for r in predicted
               if r["device"] == "gpu")  # (the JSON rounds both)
    assert {r["iteration_s"] for r in predicted if r["device"] == "cpu"} == {by_batch["32"]}
    assert {r["iteration_s"] for r in predicted if r["device"] == "gpu"} == {0.045}
    assert {(r["device"], r["nodes"], r["link_gbps"]) for r in predicted} == set(
        itertools.product(("cpu", "gpu"), NODES, LINKS_GBPS))
    assert all(0 < r["efficiency"] < 1 and r["sync_s"] > 0 for r in predicted)
    assert any("assumed" in ln and "GPU iteration" in ln for ln in lines), proc.stdout
    assert any("sync.global_batch: CPU nodes each learn" in ln for ln in lines), proc.stdout
    assert any("ring fit to 2 ranks: alpha" in ln for ln in lines), proc.stdout
    assert not (tmp_path / "s").exists()  # a benchmark leaves no run directory behind
    # the same all-reduces on 2 emulated hosts with 200 Mbit/s links (launch.spawn.hosts), against the model:
    # a ring of 2 sends each rank's whole tensor over its link, which no load can make faster than
    # the rate, once the token bucket's burst (launch.spawn.hosts: 256 KiB here) is spent
    (link,) = result["links"]
    assert link["link"] == "200mbit" and [r["bytes"] for r in link["rows"]] == [m["bytes"] for m in measured]
    for r in link["rows"]:
        assert r["seconds"] >= 0.9 * (r["bytes"] - 256 * 1024) * 8 / 200e6, r
        assert r["model_s"] > 0 and r["bottleneck_s"] >= r["model_s"]
    assert any("all-reduce on emulated hosts, every link 200mbit" in ln for ln in lines), proc.stdout


CASES = [
    (["bench.scaling_ranks=[1,2]"], "bench.scaling_ranks: each must be in [2, 64]"),
    (["bench.scaling_repeats=0"], "bench.scaling_repeats must be >= 1, got 0"),
    (["bench.scaling_steps=0"], "bench.scaling_steps must be >= 1, got 0"),
    (["bench.gpu_iteration_s=0"], "bench.gpu_iteration_s must be > 0"),
    (["nodes=2"], "launch.scaling predicts 8, 64, 256 nodes from measurements on this machine: leave nodes=1"),
    (["train.device=cuda"], "use train.device=cpu, got 'cuda'"),
    (["bench.scaling_links=[fast]"], "launcher.link must be a rate such as 100mbit, 1gbit or 10gbit, got 'fast'"),
]


@pytest.mark.parametrize("overrides,message", CASES, ids=[c[0][0] for c in CASES])
def test_bad_value_is_refused_before_anything_starts(tmp_path, overrides, message):
    proc = run_module("launch.scaling", f"hydra.run.dir={tmp_path}/s", "env=gym", "env.id=CartPole-v1",
                      "model=mlp", *overrides, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in one_error_line(proc)
    assert not proc.stdout.strip() and not (tmp_path / "s").exists()
