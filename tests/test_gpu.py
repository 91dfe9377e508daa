"""What only a GPU can show (docs/gpu.md, "What has and has not run"). Skipped, with the reason,
where torch sees no CUDA device: the CPU-testable parts of the GPU paths are in
test_placement.py, test_device_paths.py, test_peers_nccl_ready.py and test_slurm.py.

Run on a GPU node: `python -m pytest -q tests/test_gpu.py` (and the benchmark in docs/gpu.md).
"""
import os
import re
import signal
import time

import pytest
import torch
from helpers import read_until, start_train, summary, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: run tests/test_gpu.py on a GPU node")

TWO_GYM = ["nodes=2", "env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
           "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
           "sampler.batch_size=128", "train.status_every_s=1", "sync.check_every=5", "sync.timeout_s=60"]


def logs(run_dir):
    return "".join(open(os.path.join(run_dir, f)).read() for f in os.listdir(run_dir) if f.startswith("train"))


def test_single_node_on_the_gpu_learns_doom_basic(run_dir):
    # the CPU enjoy test's recipe: 120k frames at lr 5e-4 take doom_basic from random play (about
    # -180 per episode) to a greedy score near 0; the sampled training episodes must be well above random
    train(run_dir, "env=doom_basic", "train.device=cuda", "sampler.batch_size=512", "algo.lr=5e-4",
          "train.max_env_frames=120000", timeout=600)
    s = summary(run_dir)
    text = logs(run_dir)
    assert s["outcome"] == "finished" and s["env_frames"] >= 120_000
    assert "policy worker 0 ready on cuda:0" in text, text[-3000:]  # inference on the GPU
    assert s["mean_episode_reward"] > -50, s
    print(f"\ndoom_basic on {torch.cuda.get_device_name(0)}: {s['fps']:.0f} frames/s, "
          f"mean reward {s['mean_episode_reward']:.1f}, policy lag {s['policy_lag_mean']:.2f}")


def test_two_local_ranks_share_one_gpu_over_gloo(run_dir):
    """NCCL refuses two ranks on one GPU; gloo carries CUDA tensors (sync.backend=gloo)."""
    train(run_dir, *TWO_GYM, "train.device=cuda", "sync.backend=gloo", "train.max_env_frames=6000", timeout=300)
    s = summary(run_dir)
    assert s["nodes"] == 2 and s["outcome"] == "finished"
    assert s["param_checksums"][0] == s["param_checksums"][1]
    text = logs(run_dir)
    assert len(re.findall(r"policy worker 0 ready on cuda:0", text)) == 2, text[-3000:]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between two ranks needs two GPUs")
def test_two_ranks_over_nccl_train_alike_and_a_killed_peer_is_named_in_seconds(run_dir, tmp_path):
    train(run_dir, *TWO_GYM, "train.device=cuda", "train.max_env_frames=6000", timeout=300)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["param_checksums"][0] == s["param_checksums"][1]
    assert "rank 1 of 2" in logs(run_dir) and "device cuda:1" in logs(run_dir)

    other = str(tmp_path / "killed")
    proc = start_train(other, *TWO_GYM, "train.device=cuda", "train.max_env_frames=0", "train.checkpoint_every_s=1")
    m, _ = read_until(proc, r"started 2 nodes on .* \(pids (\d+) (\d+)\)", 60)
    read_until(proc, r"checkpoint .*checkpoint_\d+\.pt", 180)
    os.kill(int(m.group(2)), signal.SIGKILL)
    t0 = time.time()
    out = proc.communicate(timeout=120)[0]
    took = time.time() - t0
    assert proc.returncode != 0 and re.search(r"lost rank 1", out), out[-3000:]
    assert took < 30, f"the survivor took {took:.0f} s to name the lost rank and exit (sync.timeout_s=60)"
    assert summary(other)["outcome"] == "failed"
