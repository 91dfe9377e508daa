"""launch.limit: the limit's arithmetic, a short real run on CartPole (every figure printed and in
the JSON, the efficiency below 1), and bad values refused in one line before anything starts."""
import json

import pytest
from helpers import one_error_line, run_module

from launch.tools.limit_harness import ModelFlops, limit


def test_the_limit_adds_the_simulations_core_time_to_the_arithmetics_over_the_cores():
    flops = ModelFlops(inference_per_step=20e6, learning_per_sample=60e6, learner_step_s=0.3, learner_samples=1024)
    lim = limit(cores=2, sim_fps=25_000, sim_cores=2.0, flops=flops, frameskip=4, rate_gflops=2_000)
    assert lim.sim_core_s == pytest.approx(80e-6)  # 2 cores busy for 25k frames a second
    assert lim.flops_per_frame == pytest.approx(20e6)  # (20 + 60) MFLOP per agent step, 4 frames each
    assert lim.arithmetic_core_s == pytest.approx(20e6 / 1e12)  # 2 TFLOP/s on 2 cores: 1 TFLOP/s a core
    assert lim.fps == pytest.approx(2 / (80e-6 + 20e-6))
    assert limit(2, 25_000, 2.0, flops, 4, 4_000).fps > lim.fps > limit(2, 20_000, 2.0, flops, 4, 2_000).fps


def test_a_short_run_prints_the_kernels_the_model_and_the_efficiency(tmp_path):
    proc = run_module("launch.limit", f"hydra.run.dir={tmp_path}/l", "env=gym", "env.id=CartPole-v1", "model=mlp",
                      "sampler.num_workers=1", "sampler.envs_per_worker=4", "bench.seconds=1", "bench.warmup_s=0.5",
                      timeout=240)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for kind in ("matmul", "conv"):
        assert set(out["kernel_gflops"][kind]) == {"fp32", "bf16"} and min(out["kernel_gflops"][kind].values()) > 0
    assert out["best_gflops"] == pytest.approx(max(r[out["precision"]] for r in out["kernel_gflops"].values()), 1e-3)
    assert out["inference_flops_per_step"] > 0 and out["learning_flops_per_sample"] > out["inference_flops_per_step"]
    assert out["sim_fps"] > out["train_fps"] > 0 and out["limit_fps"] > out["train_fps"]
    assert 0 < out["efficiency"] < 1
    assert out["efficiency"] == pytest.approx(out["train_fps"] / out["limit_fps"], abs=1e-4)
    assert "efficiency" in proc.stdout and not (tmp_path / "l").exists()


@pytest.mark.parametrize("overrides,message", [
    (["nodes=2"], "launch.limit measures one node on this machine: leave nodes=1, got nodes=2"),
    (["train.device=cuda"], "use train.device=cpu, got 'cuda'"),
])
def test_bad_value_is_refused_before_anything_starts(tmp_path, overrides, message):
    proc = run_module("launch.limit", f"hydra.run.dir={tmp_path}/l", "env=gym", "env.id=CartPole-v1", "model=mlp",
                      *overrides, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in one_error_line(proc)
    assert not proc.stdout.strip() and not (tmp_path / "l").exists()
