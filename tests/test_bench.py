"""launch.bench prints the three phases and one JSON line whose ratios match its figures; a signal stops
it with one line. The soak script (benchmarks/soak.py) names a run's processes by kind and fits each
kind's slope after the warm-up."""
import json
import os
import signal
import subprocess
import sys
import time

from helpers import FAST_GYM, ROOT, run_module


def test_bench_prints_three_phases_and_json(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.seconds=1.5",
                      "bench.warmup_s=1", timeout=240)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result) == {"pure_sim_fps", "sampler_fps", "train_fps", "train_trained_fps", "sampler_ratio",
                           "train_ratio", "profile", "cores", "memory"}
    assert all(result[k] > 0 for k in ("pure_sim_fps", "sampler_fps", "train_fps", "train_trained_fps"))
    assert abs(result["train_ratio"] - result["train_fps"] / result["pure_sim_fps"]) < 1e-2
    assert abs(result["sampler_ratio"] - result["sampler_fps"] / result["pure_sim_fps"]) < 1e-2
    for phase in ("simulate:", "sample:", "train:"):
        assert any(ln.strip().startswith(phase) for ln in lines), proc.stdout
    # the profile: every process kind that ran, its phases' shares summing to one
    prof = result["profile"]
    assert set(prof["simulate"]) == {"learner", "rollout"}  # no policy worker, no batcher without inference
    assert set(prof["train"]) == {"learner", "batcher", "policy", "rollout"}
    for split in prof["train"].values():
        assert abs(sum(split.values()) - 1) < 0.01
    assert prof["train"]["learner"]["backward"] > 0 and prof["sample"]["learner"]["backward"] == 0
    assert prof["train"]["policy"]["forward"] > 0 and prof["simulate"]["rollout"]["env_step"] > 0
    assert result["cores"]["simulate"]["rollout"] > 0.2 and result["cores"]["train"]["main"] > 0.1
    assert any(ln.strip().startswith("learner: ") for ln in lines), proc.stdout
    # memory: the main process, janitor, policy worker and two rollout workers at least
    mem = result["memory"]
    assert mem["processes"] >= 5 and 100 < mem["peak_pss_mb"] <= mem["peak_rss_sum_mb"]
    assert mem["shared_buffers_mb"] > 0 and any("memory: peak" in ln for ln in lines), proc.stdout
    assert not (tmp_path / "b").exists()  # a benchmark leaves no run directory behind


def test_bench_modes_measures_each_training_scheme_on_the_same_layout(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.seconds=1",
                      "bench.warmup_s=0.5", "bench.modes=[async,sync,deterministic]", timeout=240)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert list(result["train_fps"]) == ["async", "sync", "deterministic"]
    assert all(x > 0 for x in result["train_fps"].values()) and result["ratio_to_first"]["async"] == 1.0
    fps = result["train_fps"]
    assert abs(result["ratio_to_first"]["deterministic"] - fps["deterministic"] / fps["async"]) < 1e-2
    shown = [ln.split(":")[0].strip() for ln in lines if ln.endswith(")") and "env frames/s" in ln]
    assert shown == ["async", "sync", "deterministic"], proc.stdout


def test_bench_modes_refuses_an_unknown_mode_before_starting(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.modes=[async,lockstep]",
                      check=False, timeout=120)
    assert proc.returncode == 2 and "bench.modes: each must be one of async, sync, deterministic, got 'lockstep'" \
        in proc.stderr, proc.stderr


def test_soak_trains_and_reports_memory_growth_after_the_warm_up(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.soak_s=6",
                      "bench.warmup_s=2", timeout=240)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["soak_s"] == 6 and result["env_frames"] > 0 and result["train_fps"] > 0
    samples = result["samples_mb"]
    after = [mb for t, mb in samples if t >= 2]  # the warm-up counts from the launch
    assert len(samples) >= 6 and all(mb > 100 for mb in after)
    assert result["pss_first_max_mb"] in after and result["pss_last_max_mb"] in after
    first, last = result["pss_first_max_mb"], result["pss_last_max_mb"]
    assert abs(result["growth"] - (last - first) / first) < 1e-2
    assert "soak: resident (PSS)" in proc.stdout and not (tmp_path / "b").exists()


def test_soak_growth_compares_the_first_and_last_sixth_peaks_and_floors():
    from launch.bench import soak_growth
    # a node swinging between 100 and 130 each step: no growth, whichever two samples one picks
    flat = [(t, 100 + 30 * (t % 2)) for t in range(60)]
    g = soak_growth(flat, warmup_s=0)
    assert g["growth"] == 0 and g["floor_growth"] == 0
    # a leak of 1 per sample lifts the peaks and the floor alike
    leak = [(t, 100 + 30 * (t % 2) + t) for t in range(60)]
    g = soak_growth(leak, warmup_s=12)  # 48 samples after it: sixths of 8
    assert (g["first_min"], g["first_max"]) == (112, 149) and (g["last_min"], g["last_max"]) == (152, 189)
    assert g["growth"] == round(40 / 149, 4) and g["floor_growth"] == round(40 / 112, 4)


def test_soak_refuses_several_nodes_before_starting(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.soak_s=60", "nodes=2",
                      check=False, timeout=120)
    assert proc.returncode == 2 and "bench.soak_s watches one node's memory: use nodes=1" in proc.stderr


def test_bench_nodes_reports_total_per_node_and_sync_share(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", "nodes=2", *FAST_GYM, "sampler.num_workers=1",
                      "bench.seconds=1.5", "bench.warmup_s=1", timeout=300)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["nodes"] == 2 and len(result["per_node_fps"]) == 2 and len(result["sync_share"]) == 2
    assert result["train_fps"] > 0 and all(x > 0 for x in result["per_node_fps"])
    # the total is the sum of the nodes (same run, same clock)
    assert abs(sum(result["per_node_fps"]) - result["train_fps"]) / result["train_fps"] < 0.05
    assert all(0 <= s < 1 for s in result["sync_share"])
    assert abs(result["scaling"] - result["train_fps"] / result["single_node_train_fps"]) < 1e-2
    # each rank's sync per iteration is its share of one iteration: positive, and less than the iteration
    assert result["iteration_s"] > 0 and len(result["sync_s_per_iteration"]) == 2
    assert all(0 < s < result["iteration_s"] for s in result["sync_s_per_iteration"])


def test_sigterm_stops_the_bench_with_one_line(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM,
                             "bench.seconds=60", "bench.warmup_s=1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().startswith("bench: env=gym")
    time.sleep(4)  # the simulate phase's workers are up
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "Traceback" not in out + err, err[-3000:]
    assert err.strip().splitlines()[-1] == "bench: stopped by SIGTERM", err
    assert not (tmp_path / "b").exists()


def _soak_modules():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import soak
    import soak_report
    return soak, soak_report


def test_soak_report_fits_each_kinds_slope_after_the_warm_up():
    _, report = _soak_modules()
    mb = 1 << 20

    def sample(t):
        node = dict(n=1, pss=(100 + t / 60 + 5 * (t // 60 % 2)) * mb, rss=200 * mb, fds=50, threads=4)
        procs = {"node": node, **({"evaluator": dict(n=1, pss=30 * mb, rss=30 * mb, fds=9, threads=1)}
                                  if t // 60 % 2 else {})}
        runs = {"a": dict(procs=procs, dir=dict(tb=t * 10, checkpoints=0, logs=0, other=0))}
        if t <= 1200:  # run b ends at 20 min: no zeros after its end
            runs["b"] = dict(procs={"node": dict(n=2, pss=50 * mb, rss=60 * mb, fds=20, threads=2)}, dir={})
        return dict(t=t, runs=runs, machine=dict(bytes=10 * mb, entries=3))

    rows = {(r["run"], r["kind"], r["metric"]): r for r in report.rows([sample(60 * i) for i in range(31)], 600)}
    node = rows[("a", "node", "pss")]  # 1 MB a minute under a 5 MB swing: 60 MB an hour
    assert node["at_skip"] == 110 * mb and node["end"] == 130 * mb and abs(node["slope_h"] / mb - 60) < 1.5
    assert rows[("a", "evaluator", "pss")]["n"] == "0-1"  # absent in every other sample: counted 0 there
    assert rows[("a", "run dir", "tb")]["slope_h"] == 36000 and rows[("a", "node", "fds")]["slope_h"] == 0
    b = rows[("b", "node", "pss")]
    assert b["n"] == "2" and b["end"] == 50 * mb and b["slope_h"] == 0
    assert rows[("machine", "/dev/shm", "entries")]["pct_h"] == 0
    assert "| a | node | 1 | pss | 110.0 MB | 130.0 MB |" in report.table([sample(60 * i) for i in range(31)], 600)


def test_soak_names_each_process_of_a_run_by_kind():
    soak, _ = _soak_modules()
    py, fs = "/usr/bin/python", "-c from multiprocessing.forkserver import main; main(4, 6)"
    table = [(10, 1, 0, [py, "-m", "launch.train", "nodes=2"], "python"),
             (11, 10, 0, [py, "-m", "launch.node", "/run"], "python"),
             (12, 11, 0, [py, "-B", fs], "python"), (13, 11, 0, [py, "/x/nodes/janitor.py", "11"], "python"),
             (14, 11, 0, [py, "-B", "-c", "from multiprocessing.resource_tracker import main;main(4)"], "python"),
             (20, 12, 5, [py, "-B", fs], "python"), (15, 12, 7, [py, "-B", fs], "python"),
             (16, 12, 7, [py, "-B", fs], "python"), (17, 12, 9, [py, "-B", fs], "evaluator"),
             (18, 17, 9, ["/v/vizdoom", "+viz_instance_id", "x"], "vizdoom"),
             (19, 16, 9, ["/v/vizdoom"], "vizdoom"), (21, 12, 9, [py, "-B", fs], "store_keeper"),
             (30, 1, 0, [py, "-m", "launch.train", "env=doom_basic"], "python")]
    procs = {pid: soak.Proc(pid, ppid, pid if pid == 30 else 10, start, comm, argv)  # 30: a session of its own
             for pid, ppid, start, argv, comm in table}
    kinds = {pid: soak.kind_of(p, procs) for pid, p in procs.items()}
    soak.name_workers(kinds, procs, policy_workers=1)
    assert kinds == {10: "launcher", 11: "node", 12: "fork server", 13: "janitor", 14: "resource tracker",
                     20: "policy worker", 15: "rollout worker", 16: "rollout worker", 17: "evaluator",
                     18: "evaluator's engine", 19: "vizdoom engine", 21: "store keeper", 30: "node"}
    assert soak.members(10, procs) == [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
