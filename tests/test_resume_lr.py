"""The learning rate after a resume (docs/configuration.md, algo.lr_schedule and algo.lr_scaling):
algo.lr (a population member's: its PBT lr) x the schedule's decay at the resumed run's progress x
(nodes in the world)^(0 | 1/2 | 1), whatever the checkpoint's optimizer held: it was scaled for
another launch's nodes and progress, and algo.lr may have changed since.

The matrix runs the real objects a node resumes with (Members, RunState, a checkpoint file written
and read back) and calls what the loop calls each iteration (Learner.schedule_lr); one run checks the
same end to end, through the trainer's own TensorBoard scalars."""
import glob
import os

import pytest
import torch
from helpers import compose, train

from nodes.config.validate import LR_SCALING
from nodes.envs import env_spec
from nodes.population.members import Members
from nodes.record import checkpoint as ckpt
from nodes.run.peers import Solo
from nodes.run.run_state import RunState

TINY = ["env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32", "sampler.num_workers=1",
        "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=64", "train.status_every_s=1"]
MAX_FRAMES = 40_000


def run_state(schedule, scaling, lr, nodes):
    cfg = compose(*TINY, f"algo.lr_schedule={schedule}", f"algo.lr_scaling={scaling}", f"algo.lr={lr}",
                  f"nodes={nodes}", f"train.max_env_frames={MAX_FRAMES}")
    return RunState(Members(cfg, env_spec(cfg.env), Solo(), torch.device("cpu")))


def expected_lr(lr, schedule, scaling, nodes, frames):
    decay = 1 - frames / MAX_FRAMES if schedule == "linear" else 1.0
    return lr * decay * nodes ** LR_SCALING[scaling]


@pytest.mark.parametrize("lr_after", [1e-3, 3e-3], ids=["same-lr", "changed-lr"])
@pytest.mark.parametrize("scaling", ["none", "linear"])
@pytest.mark.parametrize("schedule", ["constant", "linear"])
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2), (2, 2)], ids=["fewer", "more", "same"])
def test_the_lr_after_a_resume_is_this_launchs(tmp_path, before, after, schedule, scaling, lr_after):
    saved = run_state(schedule, scaling, 1e-3, before)
    saved.stats.env_frames = 10_000
    saved.learners[0].schedule_lr(10_000 / MAX_FRAMES, before)  # what the saved launch trained with
    assert saved.learners[0].lr == pytest.approx(expected_lr(1e-3, schedule, scaling, before, 10_000))
    path = ckpt.save(str(tmp_path), saved.state_dict(episodes=0), keep=2)

    resumed = run_state(schedule, scaling, lr_after, after)
    resumed.load_state_dict(ckpt.load(path), path, episodes_here=True)
    frames = resumed.stats.env_frames
    assert frames == 10_000
    for progress_frames in (frames, frames + 6_000):  # the first iteration after the resume, and a later one
        resumed.learners[0].schedule_lr(progress_frames / MAX_FRAMES, after)
        assert resumed.learners[0].lr == pytest.approx(expected_lr(lr_after, schedule, scaling, after,
                                                                   progress_frames)), (before, after)


def logged_lr(run_dir):
    """train/lr by env frames, from every TensorBoard file of the run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = {}
    for path in glob.glob(os.path.join(run_dir, "tb", "events.*")):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        out.update({e.step: e.value for e in acc.Scalars("train/lr")} if "train/lr" in acc.Tags()["scalars"] else {})
    return out


def test_a_two_node_run_resumed_on_one_node_trains_at_one_nodes_lr(run_dir):
    """The issue's measurement: 2 nodes with algo.lr_scaling=linear (lr 2e-3), resumed with nodes=1:
    the lr after the resume is 1e-3 (it stayed 2e-3)."""
    args = [*TINY, "algo.lr=0.001", "algo.lr_scaling=linear", "sync.elastic=false"]
    train(run_dir, *args, "nodes=2", "train.max_env_frames=2048", timeout=240)
    first = logged_lr(run_dir)
    assert first and all(v == pytest.approx(2e-3) for v in first.values()), first
    train(run_dir, *args, "nodes=1", "train.max_env_frames=4096", timeout=240)
    after = {step: v for step, v in logged_lr(run_dir).items() if step > max(first)}
    assert after and all(v == pytest.approx(1e-3) for v in after.values()), after
