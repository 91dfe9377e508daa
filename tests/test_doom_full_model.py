"""doom_defend_the_center trains with the "full" model on measurements + pixels, and doom
deathmatch with multi-head actions: through the real engine, sampler and learner."""
import torch
from helpers import summary, train

from nodes.record import checkpoint as ckpt

SMALL = ["sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=128"]


def test_defend_the_center_full_model(tmp_path):
    run = str(tmp_path / "run")
    train(run, "env=doom_defend_the_center", "model=full", *SMALL, "train.max_env_frames=6000", timeout=300)
    s = summary(run)
    assert s["outcome"] == "finished" and s["env_frames"] >= 6000 and s["episodes"] > 0
    state = ckpt.load(ckpt.latest(run))["model"]
    # the measurements went through the buffers into the learner: their running statistics are
    # those of AMMO2 (starts at 26, only falls) and HEALTH (100 at most, above 0 while alive)
    assert int(state["meas_norm.count"]) == s["policy_version"] * 128
    ammo, health = state["meas_norm.mean"].tolist()
    assert 0 < ammo <= 26 and 0 < health <= 100
    assert "meas_mlp.0.weight" in state and torch.isfinite(state["meas_mlp.0.weight"]).all()


def test_deathmatch_multi_head_actions_train(tmp_path):
    run = str(tmp_path / "run")
    train(run, "env=doom_deathmatch", "model=full", *SMALL, "train.max_env_frames=3000", timeout=300)
    s = summary(run)
    assert s["outcome"] == "finished" and s["policy_version"] >= 5
    state = ckpt.load(ckpt.latest(run))["model"]
    assert state["actor.weight"].shape[0] == 3 + 3 + 2 + 2 + 7 + 11  # one output per option of each head
