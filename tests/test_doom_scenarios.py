"""Every VizDoom scenario in conf/env/ resets and steps through the real engine with the
observation and action spaces its config promises."""
import glob
import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from conftest import ROOT
from nodes.config import EnvConfig
from nodes.envs import check_env_config, env_spec, make_env

SCENARIOS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "conf", "env", "doom_*.yaml")))


def load(name):
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EnvConfig),
                                               OmegaConf.load(os.path.join(ROOT, "conf", "env", f"{name}.yaml"))))


def test_the_seed_papers_scenarios_are_all_there():
    for name in ("doom_basic", "doom_defend_the_center", "doom_defend_the_line", "doom_health_gathering",
                 "doom_health_gathering_supreme", "doom_deadly_corridor", "doom_my_way_home", "doom_take_cover",
                 "doom_predict_position", "doom_deathmatch"):
        assert name in SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_resets_and_steps(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # VizDoom writes _vizdoom/ into the working directory
    cfg = load(name)
    check_env_config(cfg)
    spec = env_spec(cfg)
    assert spec.obs_shape == (3, 72, 128) and spec.action_heads[0] >= 3
    env = make_env(cfg, seed=1)
    try:
        obs = env.reset()
        assert obs.shape == spec.obs_shape and obs.dtype == np.uint8 and obs.std() > 0  # a rendered frame
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs, reward, done, _ = env.step(int(rng.integers(spec.action_heads[0])))
            assert isinstance(reward, float)
            if done:
                obs = env.reset()
            assert obs.shape == spec.obs_shape and obs.dtype == np.uint8
    finally:
        env.close()
