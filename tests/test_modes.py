"""sampler.mode: the training schemes on the same envs, models, losses and launchers.

sync (DD-PPO): every env collects `rollout` steps with the current policy, the learner learns on
all of them, and only then do the envs collect again: the policy lag is exactly 0 at every
iteration, on one node and on several."""
import os
import re

from helpers import FAST_GYM, one_error_line, run_module, summary, train


def lag_lines(run_dir, log="train.log"):
    return re.findall(r"policy lag ([\d.]+) \(max (\d+)\)", open(os.path.join(run_dir, log)).read())


def test_sync_mode_trains_with_policy_lag_zero(run_dir):
    train(run_dir, *FAST_GYM, "sampler.mode=sync", "train.max_env_frames=20000", timeout=180)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["policy_lag_mean"] == 0.0
    # a batch is every env's rollout: 2 workers x 4 envs x 16 steps
    assert s["env_frames"] // s["policy_version"] == 2 * 4 * 16
    lines = lag_lines(run_dir)
    assert lines and all(mean == "0.00" and mx == "0" for mean, mx in lines), lines
    assert s["mean_episode_reward"] > 30  # CartPole: random play is about 22


def test_sync_mode_on_two_nodes_stays_identical_with_lag_zero(run_dir):
    train(run_dir, *FAST_GYM, "nodes=2", "sampler.num_workers=1", "sampler.mode=sync", "sync.straggler=false",
          "sync.check_every=5", "train.max_env_frames=8000", timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["nodes"] == 2
    assert s["param_checksums"][0] == s["param_checksums"][1] and s["policy_lag_mean"] == 0.0
    assert all(x == 4 * 16 * s["policy_version"] for x in s["samples_per_rank"]), s["samples_per_rank"]


def test_sync_mode_with_straggler_cut_off_on_several_nodes_is_refused(tmp_path):
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", *FAST_GYM, "nodes=2", "sampler.mode=sync",
                      check=False, timeout=120)
    assert proc.returncode == 2
    one_error_line(proc)
    assert "sampler.mode=sync with several nodes needs sync.straggler=false" in proc.stderr
