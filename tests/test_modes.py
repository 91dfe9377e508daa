"""sampler.mode: the training schemes on the same envs, models, losses and launchers.

sync (DD-PPO): every env collects `rollout` steps with the current policy, the learner learns on
all of them, and only then do the envs collect again: the policy lag is exactly 0 at every
iteration, on one node and on several.

deterministic (HTS-RL): the envs collect the next round while the learner learns on the last one
(lag exactly 1), and a run is bit-for-bit reproducible for its seed: on one node and on two,
whatever the numbers of rollout and policy workers for the same envs, and a resumed run for its
checkpoint (it is not the uninterrupted run: docs/concepts.md says why)."""
import os
import re
import shutil

from helpers import FAST_GYM, one_error_line, run_module, summary, train


def lag_lines(run_dir, log="train.log"):
    return re.findall(r"policy lag ([\d.]+) \(max (\d+)\)", open(os.path.join(run_dir, log)).read())


def test_sync_mode_trains_with_policy_lag_zero(run_dir):
    # sampler.batch_size is not what a round learns on (a batch is every env's rollout)
    train(run_dir, *FAST_GYM, "sampler.mode=sync", "sampler.batch_size=64", "train.max_env_frames=20000", timeout=180)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["policy_lag_mean"] == 0.0
    # a batch is every env's rollout: 2 workers x 4 envs x 16 steps, and the log says so
    assert s["env_frames"] // s["policy_version"] == 2 * 4 * 16
    assert re.search(r"training: .* batch 128, rollout 16", open(os.path.join(run_dir, "train.log")).read())
    lines = lag_lines(run_dir)
    assert lines and all(mean == "0.00" and mx == "0" for mean, mx in lines), lines
    assert s["mean_episode_reward"] > 30  # CartPole: random play is about 22


def test_sync_mode_preempts_the_straggling_rank_rollouts_as_dd_ppo_does(tmp_path):
    """Rank 1 steps at about half speed. Once rank 0 has its round, rank 1's rollouts end early
    (each at least sync.min_batch_frac of T), the all-reduce weights the ranks by their samples,
    and the policy lag stays 0."""
    run = tmp_path / "run"
    train(run, "nodes=2", "env=gym", "env.id=tests.envs:SlowOnRank1Bandit-v0", "model.fc_size=32",
          "model.hidden_size=32", "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=32",
          "sampler.mode=sync", "sync.min_batch_frac=0.25", "sync.check_every=5", "train.max_env_frames=20000",
          timeout=300)
    s = summary(run)
    assert s["outcome"] == "finished" and s["param_checksums"][0] == s["param_checksums"][1]
    assert s["policy_lag_mean"] == 0.0
    fast, slow = s["samples_per_rank"]
    # rank 1 at least a quarter of each rollout; rank 0 nearly always whole rounds (it can be
    # preempted too when it falls behind once: whoever finishes first cuts the other short)
    assert 4 * 8 * s["policy_version"] <= slow < fast <= 4 * 32 * s["policy_version"], s
    assert s["partial_batches"] >= s["policy_version"] // 2, s


# learner threads pinned: their default follows the layout (the cores the workers leave), and the
# learner's sums may split by thread
DOOM_DET = ["sampler.mode=deterministic", "train.max_env_frames=2000", "train.status_every_s=1",
            "train.learner_threads=1"]
# one rollout worker: the layouts are the VizDoom test's business, here fewer processes start
GYM_DET = [*FAST_GYM, "sampler.num_workers=1", "sampler.envs_per_worker=8", "sampler.mode=deterministic",
           "train.max_env_frames=4000"]


def checksum(run_dir):
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["policy_lag_mean"] == 1.0, s
    assert len(set(s["param_checksums"])) == 1  # every rank agrees
    return s["param_checksums"][0], s["policy_version"]


def test_deterministic_vizdoom_runs_end_identical_whatever_the_layout_and_differ_with_the_seed(tmp_path):
    """The real VizDoom engine, 8 envs: 1 worker x 8 envs, 2 workers x 4 envs with 2 policy
    workers, and a third run with another seed."""
    layouts = {"1x8": ["sampler.num_workers=1", "sampler.envs_per_worker=8"],
               "2x4_2pw": ["sampler.num_workers=2", "sampler.envs_per_worker=4", "sampler.num_policy_workers=2"],
               "seed1": ["sampler.num_workers=1", "sampler.envs_per_worker=8", "seed=1"]}
    for name, layout in layouts.items():
        train(tmp_path / name, *DOOM_DET, *layout, timeout=240)
    got = {name: checksum(tmp_path / name) for name in layouts}
    assert got["1x8"] == got["2x4_2pw"] and got["1x8"][1] == 2  # 2 rounds of 8 envs x 32 steps x frameskip 4
    assert got["seed1"][0] != got["1x8"][0]
    # the first update has no older policy: its lag is 0; every later one is exactly 1
    text = open(tmp_path / "1x8" / "train.log").read()
    lines = re.findall(r"policy lag ([\d.]+) \(max (\d+)\) \| version (\d+)", text)
    assert lines and all((mean, mx) == ("1.00", "1") for mean, mx, version in lines if int(version) > 1), lines


def test_deterministic_runs_on_two_nodes_end_identical_and_a_resume_is_reproducible(tmp_path):
    """Two resumes on two nodes of one run (from its final checkpoint) end identical, and they
    are not the uninterrupted run: the envs' engine state is not in the checkpoint
    (docs/concepts.md, "Training schemes"). Two runs from scratch are not repeated here: the
    resumes are two-node deterministic training too, and layouts from scratch are compared above
    (a second run from scratch cost ~14 s of the suite on the 2-core AMD VM)."""
    two_nodes = ["nodes=2", "sync.straggler=false", "sync.check_every=5"]
    a_run = tmp_path / "a"
    train(a_run, *GYM_DET[:-1], "train.max_env_frames=2000", *two_nodes, timeout=240)
    a, va = checksum(a_run)
    assert va > 5
    for name in ("r1", "r2"):
        shutil.copytree(a_run, tmp_path / name)
        train(tmp_path / name, *GYM_DET, *two_nodes, timeout=240)
    (r1, v1), (r2, v2) = checksum(tmp_path / "r1"), checksum(tmp_path / "r2")
    assert summary(tmp_path / "r1")["resumed_from"] and v1 > va
    assert r1 == r2 != a and v1 == v2


def test_deterministic_mode_with_straggler_handling_on_several_nodes_is_refused(tmp_path):
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", *FAST_GYM, "nodes=2",
                      "sampler.mode=deterministic", check=False, timeout=120)
    assert proc.returncode == 2
    one_error_line(proc)
    assert "sampler.mode=deterministic with several nodes needs sync.straggler=false" in proc.stderr
