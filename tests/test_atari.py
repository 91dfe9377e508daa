"""Atari through the real ALE (ale-py's bundled ROMs): spaces, preprocessing, lives, clipping, training."""
import math
import os

import numpy as np
import pytest
from helpers import group_conf, missing_dependency, refusal, summary, train

from nodes.envs import check_env_config, env_spec, make_env

try:
    import ale_py  # noqa: F401
    ALE_MISSING = None
except ImportError as exc:
    ALE_MISSING = f"ale_py is not installed ({exc}): pip install -e '.[atari]'"


@pytest.fixture(autouse=True)
def _needs_ale():
    """Every test here runs the real ALE: skipped without it, failed under CI=true."""
    if ALE_MISSING:
        missing_dependency(ALE_MISSING)


def conf(name, **overrides):
    """The EnvConfig that `env=<name>` selects (composed from conf/), with fields replaced."""
    return group_conf("env", name, **overrides)


@pytest.fixture
def breakout():
    env = make_env(conf("atari_breakout"), seed=3)
    yield env
    env.close()


def test_spaces_reset_and_frame_stack(breakout):
    cfg = conf("atari_breakout")
    check_env_config(cfg)
    spec = env_spec(cfg)
    assert spec.obs_shape == (4, 84, 84) and spec.obs_dtype == np.uint8 and spec.action_heads == (4,)
    obs = breakout.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert (obs == obs[0]).all() and obs.max() > 0  # a fresh stack repeats the first frame
    rng = np.random.default_rng(0)
    for _ in range(50):
        prev = obs
        obs, reward, done, info = breakout.step(int(rng.integers(4)))
        if done:
            break
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert (obs[:-1] == prev[1:]).all()  # oldest frame first, one new frame per step
    frame = breakout.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8


def play_one_game(env, rng):
    """Random play until game over; returns the score of each life, checking every lost life."""
    env.reset()
    lives, frame_no, scores = env.ale.lives(), 0, [0.0]
    assert lives == 5
    for _ in range(5000):
        obs, reward, done, info = env.step(int(rng.integers(4)))
        scores[-1] += reward
        if done and info.get("episode_end", True):
            assert obs is None and env.ale.game_over() and len(scores) == 5
            return scores
        assert env.ale.getEpisodeFrameNumber() > frame_no  # the game was never restarted
        frame_no = env.ale.getEpisodeFrameNumber()
        if done:  # life lost: no reset() follows, obs is the next observation (a fresh stack)
            assert info["episode_end"] is False and env.ale.lives() == lives - 1
            assert obs.shape == (4, 84, 84) and (obs == obs[-1]).all()
            lives -= 1
            scores.append(0.0)
    pytest.fail("no game over in 5000 steps")


def test_a_lost_life_ends_the_trajectory_not_the_game(breakout):
    rng = np.random.default_rng(0)
    for _ in range(40):  # random play scores ~1 point a game: find one scoring in two lives
        scores = play_one_game(breakout, rng)
        if scores[0] > 0 and sum(scores[1:]) > 0:
            break
    else:
        pytest.fail("no game scored both before and after its first lost life")
    # the caller adds up one score over all five lives, as the rollout worker does
    assert breakout.reset().shape == (4, 84, 84) and breakout.ale.lives() == 5


def test_fire_reset_serves_the_ball_after_a_reset_and_every_lost_life():
    """Breakout serves the ball on FIRE: standing still (no-ops), the game never loses a life
    without env.fire_reset and plays through all five to game over with it."""
    def noop_play(fire):
        env = make_env(conf("atari_breakout", fire_reset=fire), seed=3)
        try:
            env.reset()
            lost = 0
            for step in range(3000):
                obs, _, done, info = env.step(0)  # NOOP
                if done and info.get("episode_end", True):
                    return lost, step
                if done:  # a life lost, served again: the game goes on
                    assert obs.shape == (4, 84, 84) and env.ale.lives() == 4 - lost
                    lost += 1
            return lost, None
        finally:
            env.close()

    assert noop_play(False) == (0, None)
    lost, over_at = noop_play(True)
    assert lost == 4 and over_at is not None, (lost, over_at)


def test_training_reward_is_the_clipped_score():
    env = make_env(conf("atari_space_invaders"), seed=1)  # 5..30 points per alien
    env.reset()
    rng = np.random.default_rng(0)
    big = 0
    for _ in range(3000):
        obs, reward, done, info = env.step(int(rng.integers(env.spec.action_heads[0])))
        assert info.get("train_reward", reward) == np.sign(reward)
        big += reward > 1
        if done and info.get("episode_end", True):
            env.reset()
        if big >= 3:
            break
    env.close()
    assert big >= 3, "no reward above 1 seen"
    raw = make_env(conf("atari_space_invaders", clip_rewards=False), seed=1)
    raw.reset()
    infos = [raw.step(1)[3] for _ in range(100)]
    raw.close()
    assert all("train_reward" not in i for i in infos)


@pytest.mark.parametrize("overrides,message", [
    (["env=atari_nosuch"], "unknown env 'atari_nosuch' (Atari confs: atari_asteroids,"),
    (["env=atari"], "env=atari needs env.id, e.g. env.id=ALE/Breakout-v5"),
    (["env=atari", "env.id=CartPole-v1"], "unknown Atari env id 'CartPole-v1'"),
])
def test_bad_atari_selection_is_one_line(tmp_path, overrides, message):
    assert message in refusal(f"hydra.run.dir={tmp_path}/run", *overrides)


def test_breakout_trains_through_the_entry_point(run_dir):
    """env=atari_breakout: 4000 env frames (agent steps x frameskip 4) through launch.train, with
    the Atari preset (sync sampling; 2 epochs of 2 minibatches here, where the preset has 4 of 4: a
    batch is the 2 envs' rollouts, and 4 epochs took ~6 s more)."""
    train(run_dir, "env=atari_breakout", "sampler.num_workers=1", "sampler.envs_per_worker=2",
          "sampler.rollout=16", "algo.epochs=2", "algo.minibatches=2", "model.fc_size=64",
          "train.status_every_s=1", "train.max_env_frames=4000", timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["env_frames"] >= 4000
    assert s["policy_version"] >= 1 and s["episodes"] >= 1  # whole games, not lives
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(run_dir, "tb"))
    acc.Reload()
    losses = [e.value for e in acc.Scalars("train/loss")]  # one per iteration of 2 x 2 steps
    assert len(losses) * 4 == s["policy_version"] and all(math.isfinite(v) for v in losses)
