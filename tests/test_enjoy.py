"""launch.enjoy on a run trained on doom_basic: beats the random policy, writes an mp4 that
decodes to frames; bad input is one line."""
import json

import numpy as np
import pytest
from helpers import one_error_line, run_module, summary, train

EPISODES = 30


@pytest.fixture(scope="module")
def basic_run(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("enjoy") / "run")
    # 80k frames at lr 5e-4 (~25 s of training on a quiet 2-core machine): the last 100 episodes'
    # mean was -60 at 78k frames (+33 at 115k) against about -180 for random play; lr 3e-4 needed
    # 200k frames to score. It evaluates during training too (eval.every_frames): VizDoom in the
    # evaluator process
    train(run, "env=doom_basic", "sampler.batch_size=512", "algo.lr=5e-4", "train.max_env_frames=80000",
          "eval.every_frames=35000", "eval.episodes=3", timeout=600)
    assert summary(run)["env_frames"] >= 80_000
    return run


def enjoy(*args):
    out = run_module("launch.enjoy", *args, timeout=300).stdout.strip().splitlines()
    return out[-2], json.loads(out[-1])


def test_trained_policy_beats_random(basic_run):
    line, trained = enjoy(f"run_dir={basic_run}", f"enjoy.episodes={EPISODES}")
    _, random = enjoy(f"run_dir={basic_run}", f"enjoy.episodes={EPISODES}", "enjoy.random=true")
    print(f"\ntrained: {trained['reward_mean']:.1f} +- {trained['reward_std']:.1f}, "
          f"random: {random['reward_mean']:.1f} +- {random['reward_std']:.1f} ({EPISODES} episodes each)")
    assert "reward" in line and f"{EPISODES} episodes" in line
    assert trained["episodes"] == random["episodes"] == EPISODES
    assert trained["policy_version"] > 0 and trained["env_frames"] >= 80_000
    assert trained["reward_mean"] > random["reward_mean"]
    # doom_basic has no objective of its own: the true objective is the score, and the line says none
    assert trained["true_objective_mean"] == trained["reward_mean"] and "true objective" not in line


def test_video_is_a_playable_mp4(basic_run, tmp_path):
    import av
    path = tmp_path / "episode.mp4"
    _, result = enjoy(f"run_dir={basic_run}", "enjoy.episodes=1", "enjoy.video=true", f"enjoy.video_path={path}")
    assert result["video"] == str(path)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    # one frame after reset and one after every step but the last (the episode is over: no frame)
    assert len(frames) == result["video_frames"] == result["length_mean"]
    assert frames[0].shape == (120, 160, 3)
    assert np.std(frames[0]) > 10, "a blank frame"
    assert any(np.abs(f.astype(int) - frames[0]).mean() > 1 for f in frames[1:]), "the video does not move"


def test_bad_input_is_one_line(basic_run, tmp_path):
    for args, expect in [((f"run_dir={tmp_path}",), "not a run directory"),
                         ((f"run_dir={basic_run}", "enjoy.episodes=0"), "enjoy.episodes must be >= 1"),
                         ((f"run_dir={basic_run}", "enjoy.vidoe=true"),
                          "unknown config key 'enjoy.vidoe': did you mean 'enjoy.video'? (options: run_dir"),
                         ((f"run_dir={basic_run}", "enjoy.episodes=abc"), "bad value for enjoy.episodes: Value 'abc'"),
                         ((f"run_dir={basic_run}", "enjoy.seed=range(0,3)"), "launch.enjoy plays one policy"),
                         (("enjoy.episodes=3",), "run_dir=PATH is required")]:
        proc = run_module("launch.enjoy", *args, check=False)
        assert proc.returncode == 2 and expect in one_error_line(proc), proc.stderr


def test_the_run_evaluated_on_vizdoom_during_training(basic_run):
    """Two rounds (35k, 70k frames) of 3 doom_basic episodes each, played by the evaluator
    process on its own engines; its working directory (VizDoom's files) is gone after the run."""
    import os
    rounds = [json.loads(line) for line in open(os.path.join(basic_run, "eval.jsonl"))]
    assert [r["round"] for r in rounds] == [0, 1] and rounds[0]["env_frames"] >= 35_000
    assert all(-400 < r["score"] < 100 and r["members"][0]["length"] > 0 for r in rounds)  # doom_basic's range
    assert summary(basic_run)["eval"]["rounds"] == 2
    assert os.path.isfile(os.path.join(basic_run, "checkpoints", "best.pt"))
    assert not [d for d in os.listdir(os.path.join(basic_run, ".workers")) if d.startswith("evaluator")]
