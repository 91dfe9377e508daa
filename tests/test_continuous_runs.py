"""Continuous actions through the real entry points: a MuJoCo task trains and launch.enjoy plays
it, a Box env's deterministic run is bit-for-bit reproducible across layouts, two local nodes
agree by checksum, and what cannot run is refused in one line before any process starts."""
import json
import os

import torch
from helpers import ROOT, compose, one_error_line, run_module, summary, train

from nodes import seeds
from nodes.envs import env_spec
from nodes.models.actor_critic import ActorCritic
from nodes.models.numerics import param_checksum
from nodes.record import checkpoint as ckpt

SMALL = ["model=feedforward", "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
         "sampler.batch_size=128", "train.status_every_s=1"]
PENDULUM = ["env=gym", "env.id=Pendulum-v1", *SMALL]


def initial_checksum(*overrides):
    """The parameters Node builds for this config before any step."""
    cfg = compose(*overrides)
    torch.manual_seed(seeds.derive(cfg.seed, seeds.MODEL_INIT))  # what Node does before building the model
    return param_checksum(ActorCritic(env_spec(cfg.env), cfg.model))


def test_halfcheetah_trains_and_enjoy_plays_the_mean_action(run_dir):
    args = ["env=mujoco_halfcheetah", *SMALL]
    mujoco_log = os.path.join(ROOT, "MUJOCO_LOG.TXT")  # where MuJoCo's own warning handler writes
    had_log = os.path.exists(mujoco_log)
    train(run_dir, *args, "train.max_env_frames=4000", timeout=180)
    assert had_log or not os.path.exists(mujoco_log), "MuJoCo's warnings went to a file in the working directory"
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["env_frames"] >= 4000 and s["policy_version"] >= 30
    assert s["param_checksums"][0] != initial_checksum(*args), "parameters never changed"
    model = ckpt.load(ckpt.latest(run_dir))["model"]
    assert model["action_log_std"].shape == (6,) and model["action_log_std"].abs().max() > 0  # it learned too
    out = run_module("launch.enjoy", f"run_dir={run_dir}", "enjoy.episodes=1", "enjoy.greedy=true",
                     timeout=120).stdout.strip().splitlines()
    played = json.loads(out[-1])
    assert played["episodes"] == 1 and played["length_mean"] == 1000 and played["policy_version"] == s["policy_version"]


def test_box_env_deterministic_runs_are_identical_whatever_the_layout(tmp_path):
    # learner threads pinned: their default follows the layout, and the learner's sums may split by thread
    # two epochs of two minibatches: their order is drawn from the version, the same in both layouts
    det = [*PENDULUM, "sampler.mode=deterministic", "train.max_env_frames=1200", "train.learner_threads=1",
           "algo.epochs=2", "algo.minibatches=2"]
    train(tmp_path / "1x8", *det, "sampler.envs_per_worker=8", timeout=180)  # the later value wins
    train(tmp_path / "2x4", *det, "sampler.num_workers=2", timeout=180)
    a, b = summary(tmp_path / "1x8"), summary(tmp_path / "2x4")
    assert a["outcome"] == b["outcome"] == "finished" and a["policy_version"] == b["policy_version"] >= 2
    assert a["param_checksums"] == b["param_checksums"]
    assert a["param_checksums"][0] != initial_checksum(*det)


def test_two_nodes_on_a_box_env_end_with_identical_parameters(run_dir):
    # four optimizer steps per batch (2 epochs x 2 minibatches), each an all-reduce of both ranks
    args = ["nodes=2", *PENDULUM, "sync.check_every=5", "sync.timeout_s=20", "algo.epochs=2", "algo.minibatches=2"]
    train(run_dir, *args, "train.max_env_frames=4000", timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["nodes"] == 2
    a, b = s["param_checksums"]
    assert a == b and a != initial_checksum(*args)
    # four versions an iteration; an iteration trains at most 256 frames (128 a rank; fewer when a
    # straggler's batch was cut short)
    assert s["policy_version"] % 4 == 0 and s["policy_version"] >= 4 * (s["env_frames"] // 256)


def test_a_dict_action_space_is_refused_in_one_line(run_dir):
    proc = train(run_dir, "env=gym", "env.id=tests.envs:DictActions-v0", check=False, timeout=120)
    assert proc.returncode == 2
    assert one_error_line(proc).startswith(
        "error: env=gym supports Discrete, MultiDiscrete, flat Box action spaces and Tuples of them, "
        "env.id 'tests.envs:DictActions-v0' has Dict(")


def test_mujoco_task_without_mujoco_is_refused_in_one_line(run_dir):
    hide = os.path.join(ROOT, "tests", "no_mujoco")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([hide, os.environ.get("PYTHONPATH", "")]))
    proc = train(run_dir, "env=mujoco_hopper", check=False, timeout=120, env=env)
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line.startswith("error: env.id 'Hopper-v5' needs a package that is not installed here")
    assert line.endswith("; pip install -e '.[mujoco]' in the clone"), line
    assert not os.path.exists(os.path.join(run_dir, "train.log"))  # refused before anything started
