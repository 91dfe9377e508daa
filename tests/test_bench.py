"""launch.bench prints the three phases and one JSON line whose ratios match its figures."""
import json

from conftest import FAST_GYM, run_module


def test_bench_prints_three_phases_and_json(tmp_path):
    proc = run_module("launch.bench", f"hydra.run.dir={tmp_path}/b", *FAST_GYM, "bench.seconds=3",
                      "bench.warmup_s=2", timeout=240)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result) == {"pure_sim_fps", "sampler_fps", "train_fps", "sampler_ratio", "train_ratio"}
    assert all(result[k] > 0 for k in ("pure_sim_fps", "sampler_fps", "train_fps"))
    assert abs(result["train_ratio"] - result["train_fps"] / result["pure_sim_fps"]) < 1e-2
    assert abs(result["sampler_ratio"] - result["sampler_fps"] / result["pure_sim_fps"]) < 1e-2
    for phase in ("simulate:", "sample:", "train:"):
        assert any(ln.strip().startswith(phase) for ln in lines), proc.stdout
    assert not (tmp_path / "b").exists()  # a benchmark leaves no run directory behind
