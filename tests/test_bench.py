"""launch.bench prints the three phases and one JSON line whose ratios match its figures; a signal stops
it with one line."""
import json
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
    assert set(result) == {"pure_sim_fps", "sampler_fps", "train_fps", "sampler_ratio", "train_ratio"}
    assert all(result[k] > 0 for k in ("pure_sim_fps", "sampler_fps", "train_fps"))
    assert abs(result["train_ratio"] - result["train_fps"] / result["pure_sim_fps"]) < 1e-2
    assert abs(result["sampler_ratio"] - result["sampler_fps"] / result["pure_sim_fps"]) < 1e-2
    for phase in ("simulate:", "sample:", "train:"):
        assert any(ln.strip().startswith(phase) for ln in lines), proc.stdout
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
