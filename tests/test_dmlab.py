"""DeepMind Lab envs (env=dmlab_<level>).

The engine is not installable here (not on PyPI; built from source with Bazel), so these tests
put tests/dmlab_standin on the path: a stand-in `deepmind_lab` module implementing the
documented `deepmind_lab.Lab` API, strict about its use (string config values, np.intc actions
within action_spec, observations only while running, level cache fetch/write). The
missing-engine test runs without it, the way a user without the engine would.
"""
import glob
import os
import sys

import numpy as np
import pytest
from helpers import ROOT, group_conf, run_module, summary, train

STANDIN = os.path.join(ROOT, "tests", "dmlab_standin")
CONFIGS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "conf", "env", "dmlab_*.yaml")))


def load(name, **overrides):
    return group_conf("env", name, **overrides)


@pytest.fixture
def lab(monkeypatch):
    """The stand-in `deepmind_lab` module, importable for this test only."""
    monkeypatch.syspath_prepend(STANDIN)
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    import deepmind_lab
    assert deepmind_lab.__version__ == "standin"
    yield deepmind_lab
    sys.modules.pop("deepmind_lab", None)


def _without_standin(path):
    return os.pathsep.join(p for p in (path or "").split(os.pathsep) if p and os.path.abspath(p) != STANDIN)


def test_seed_paper_levels_have_configs():
    for name in ("dmlab_seekavoid_arena", "dmlab_rooms_collect_good_objects", "dmlab_explore_goal_locations_small"):
        assert name in CONFIGS
    assert os.path.isfile(os.path.join(ROOT, "conf", "env", "dmlab.yaml"))


@pytest.mark.parametrize("name", CONFIGS)
def test_config_checks_and_spec(lab, name):
    from nodes.envs import check_env_config, env_spec
    cfg = load(name)
    assert cfg.family == "dmlab" and cfg.id in lab.LEVELS
    check_env_config(cfg)
    spec = env_spec(cfg)
    assert spec.obs_shape == (3, 72, 96) and spec.obs_dtype == np.uint8 and spec.action_heads == (9,)


def test_action_set_is_valid_for_action_spec(lab, tmp_path):
    from nodes.envs import dmlab
    env = dmlab.make(load("dmlab_seekavoid_arena", level_cache_dir=str(tmp_path)), seed=0)
    try:
        aspec = env.lab.action_spec()
        assert tuple(a["name"] for a in aspec) == dmlab.ACTION_NAMES
        assert len(env.actions) == env.spec.action_heads[0] == 9
        for a in env.actions:
            assert a.dtype == np.intc and a.shape == (len(aspec),)
            assert all(s["min"] <= v <= s["max"] for v, s in zip(a.tolist(), aspec))
        env.reset()
        for i in range(9):  # the stand-in rejects anything off-spec
            env.step(i)
    finally:
        env.close()


def test_standin_catches_misuse(lab):
    with pytest.raises(TypeError):
        lab.Lab("seekavoid_arena_01", ["RGB"], config={"width": 96, "height": "72"})
    with pytest.raises(ValueError):
        lab.Lab("seekavoid_arena_01", ["RGB_INTERLACED_TYPO"], config={})
    env = lab.Lab("seekavoid_arena_01", ["RGB"], config={"width": "96", "height": "72"})
    with pytest.raises(RuntimeError):
        env.step(np.zeros(7, np.intc))  # before reset
    env.reset(seed=1)
    with pytest.raises(TypeError):
        env.step(np.zeros(7, np.int64))
    with pytest.raises(ValueError):
        env.step(np.array([0, 0, 0, 2, 0, 0, 0], np.intc))
    env.close()


@pytest.mark.parametrize("frameskip", [4, 2])
def test_reset_step_frameskip_and_episode_end(lab, tmp_path, frameskip):
    from nodes.envs import dmlab
    cfg = load("dmlab_seekavoid_arena", level_cache_dir=str(tmp_path), frameskip=frameskip)
    env = dmlab.make(cfg, seed=3)
    try:
        obs = env.reset()
        assert obs.shape == (3, 72, 96) and obs.dtype == np.uint8 and obs.std() > 0
        assert env.lab.num_steps() == 0
        frame = env.render()
        assert frame.shape == (72, 96, 3) and frame.dtype == np.uint8 and (frame == obs.transpose(1, 2, 0)).all()
        obs2, reward, done, info = env.step(5)  # look right: the view turns
        assert isinstance(reward, float) and not done and isinstance(info, dict)
        assert env.lab.num_steps() == frameskip  # num_steps counts engine frames
        assert obs2.shape == obs.shape and (obs2 != obs).any()
        steps = 1
        while not done:
            obs, _, done, _ = env.step(steps % 9)
            steps += 1
            if not done:
                assert obs.shape == (3, 72, 96)
        assert obs is None and not env.lab.is_running()
        assert steps == -(-lab.EPISODE_FRAMES // frameskip)
        obs = env.reset()
        assert obs.shape == (3, 72, 96) and env.lab.num_steps() == 0 and env.lab.is_running()
    finally:
        env.close()


def test_level_cache_written_once_and_reused(lab, tmp_path):
    from nodes.envs import dmlab
    cache = tmp_path / "cache"
    cfg = load("dmlab_explore_goal_locations_small", level_cache_dir=str(cache))
    before = dict(lab.STATS)
    first = dmlab.make(cfg, seed=7)
    first.reset()
    first.close()
    assert lab.STATS["compiled"] == before["compiled"] + 1 and lab.STATS["fetched"] == before["fetched"]
    files = sorted(os.listdir(cache))
    assert len(files) == 1 and not files[0].endswith(".tmp")
    second = dmlab.make(cfg, seed=7)  # same seed: the same episode seed, the same layout
    second.reset()
    second.close()
    assert lab.STATS["compiled"] == before["compiled"] + 1 and lab.STATS["fetched"] == before["fetched"] + 1
    assert sorted(os.listdir(cache)) == files


def test_default_level_cache_dir():
    from nodes.envs import dmlab
    assert dmlab.cache_dir(load("dmlab", id="x")) == os.path.expanduser("~/.cache/distrl/dmlab")


def test_missing_engine_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _without_standin(os.environ.get("PYTHONPATH")))
    run_dir = str(tmp_path / "run")
    proc = run_module("launch.train", f"hydra.run.dir={run_dir}", "env=dmlab_seekavoid_arena", check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: DeepMind Lab engine not found"), lines[0]
    assert "https://github.com/deepmind/lab" in lines[0] and "bazel build" in lines[0], lines[0]
    assert not os.path.exists(os.path.join(run_dir, "summary.json"))


def test_trains_through_the_real_trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (STANDIN, os.environ.get("PYTHONPATH")) if p))
    run_dir, cache = str(tmp_path / "run"), str(tmp_path / "cache")
    train(run_dir, "env=dmlab_seekavoid_arena", f"env.level_cache_dir={cache}", "sampler.num_workers=1",
          "sampler.envs_per_worker=2", "sampler.rollout=16", "sampler.batch_size=64", "train.max_env_frames=2000",
          "model.fc_size=64", "model.hidden_size=64", "train.status_every_s=1", timeout=180)
    s = summary(run_dir)
    assert s["env_frames"] >= 2000 and s["env_frames"] % 4 == 0  # frameskip 4: frames are 4 x steps
    assert s["policy_version"] >= 2000 // (64 * 4)  # learner steps of 64 samples x 4 frames
    assert s["episodes"] >= 1  # the stand-in's 240-frame episodes end and reset
    assert 1 <= len(os.listdir(cache)) <= 4  # layouts compiled once into the shared cache


def test_level_names(lab, tmp_path):
    from nodes.envs import check_env_config
    from nodes.errors import ConfigError
    for level, message in (("", "env=dmlab needs env.id"), ("../../etc/passwd", "must be a level name")):
        with pytest.raises(ConfigError, match=message) as err:
            check_env_config(load("dmlab", id=level))
        assert "\n" not in str(err.value)
    from nodes.envs import dmlab
    held_out = load("dmlab", id="contributed/dmlab30/rooms_watermaze_test", level_cache_dir=str(tmp_path))
    check_env_config(held_out)
    env = dmlab.make(held_out, seed=0)  # the wrapper sets allowHoldOutLevels for DMLab-30 test levels
    assert env.reset().shape == (3, 72, 96)
    env.close()
