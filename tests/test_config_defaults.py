"""One source of defaults: composing conf/ gives exactly the dataclasses' defaults, and no option
file under conf/ repeats a value it would get anyway (from the schema or from its family file)."""
import dataclasses
import functools
import glob
import os

import helpers
import pytest
import yaml
from helpers import CONF_DIR

from nodes.config.schema import Config

compose = functools.lru_cache(maxsize=None)(helpers.compose)  # read-only here: each option composed once

# conf/presets/ holds settings across groups that an option chooses for itself (`@_global_`), not a group
GROUPS = sorted(d for d in os.listdir(CONF_DIR) if os.path.isdir(os.path.join(CONF_DIR, d)) and d != "presets")
PRESETS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(CONF_DIR, "presets", "*.yaml")))
OPTIONS = [(g, os.path.basename(p)[:-5]) for g in GROUPS
           for p in sorted(glob.glob(os.path.join(CONF_DIR, g, "*.yaml")))]
IDENTITY = {"name", "family", "id", "mode"}  # keys that say which option this is: always written


def raw(group, name):
    with open(os.path.join(CONF_DIR, group, f"{name}.yaml")) as f:
        return yaml.safe_load(f) or {}


def test_composing_conf_gives_the_dataclass_defaults():
    composed = compose()
    assert composed == Config(), [
        f"{f.name}: conf/ {getattr(composed, f.name)} != schema {getattr(Config(), f.name)}"
        for f in dataclasses.fields(Config) if getattr(composed, f.name) != getattr(Config(), f.name)]


def test_root_config_holds_no_defaults():
    root = yaml.safe_load(open(os.path.join(CONF_DIR, "config.yaml")))
    assert set(root) == {"defaults", "hydra"}, "defaults live in nodes/config/, not in conf/config.yaml"


@pytest.mark.parametrize("group,name", OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_option_file_holds_only_what_differs(group, name):
    own = raw(group, name)
    # a family file by name; a dict entry is another group's choice (env/mujoco.yaml picks a model),
    # a /presets/ entry a preset of settings across groups (tested below)
    parents = [d for d in own.pop("defaults", [])
               if isinstance(d, str) and d != "_self_" and not d.startswith("/presets/")]
    assert len(parents) <= 1, "an option inherits at most its family file"
    # what the option would be without its own values: its family file, or the schema's defaults
    base = getattr(compose(f"{group}={parents[0]}") if parents else Config(), group)
    repeated = {k: v for k, v in own.items() if k not in IDENTITY and getattr(base, k) == v}
    assert not repeated, f"conf/{group}/{name}.yaml repeats inherited values: {repeated}"
    composed = getattr(compose(f"{group}={name}"), group)
    for key, value in own.items():
        assert getattr(composed, key) == value, key


@pytest.mark.parametrize("group,name", OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_option_names_itself(group, name):
    section = getattr(compose(f"{group}={name}"), group)
    assert getattr(section, "mode" if group == "sampler" else "name") == name


def test_games_and_scenarios_inherit_their_family_file():
    for pattern, family in (("doom_*", "doom"), ("atari_*", "atari"), ("dmlab_*", "dmlab"), ("mujoco_*", "mujoco")):
        for path in glob.glob(os.path.join(CONF_DIR, "env", f"{pattern}.yaml")):
            parents = [d for d in raw("env", os.path.basename(path)[:-5]).get("defaults")
                       if not d.startswith("/presets/")]  # a task may add a preset of its own (Humanoid's lr)
            assert parents == [family, "_self_"], path


def test_an_env_may_choose_its_model_and_the_command_line_still_wins():
    """env=mujoco_* trains model=feedforward (no recurrent core) unless the command line names a
    model; every other env keeps the root's model."""
    assert compose("env=mujoco_hopper").model == compose("model=feedforward").model
    assert compose("env=mujoco_hopper", "model=simplified").model == compose().model
    assert compose("env=mujoco_hopper", "model=mlp").model == compose("model=mlp").model
    assert compose("env=gym").model == compose().model


@pytest.mark.parametrize("name", PRESETS)
def test_preset_holds_only_what_differs_from_the_schema(name):
    own = raw("presets", name)
    assert own, f"conf/presets/{name}.yaml is empty"
    repeated = {f"{group}.{k}": v for group, section in own.items() for k, v in section.items()
                if getattr(getattr(Config(), group), k) == v}
    assert not repeated, f"conf/presets/{name}.yaml repeats schema defaults: {repeated}"


def test_mujoco_envs_train_with_their_preset_and_the_command_line_still_wins():
    preset = raw("presets", "mujoco")
    for env in ("mujoco_hopper", "mujoco_halfcheetah"):
        cfg = compose(f"env={env}")
        assert all(getattr(getattr(cfg, g), k) == v for g, section in preset.items() for k, v in section.items())
    mine = compose("env=mujoco_hopper", "algo.lr=0.01", "sampler.rollout=16")
    assert (mine.algo.lr, mine.sampler.rollout, mine.algo.epochs) == (0.01, 16, preset["algo"]["epochs"])
    assert compose("env=gym").algo == compose().algo and compose("env=gym").sampler == compose().sampler


def test_humanoid_trains_with_its_own_lr_over_the_mujoco_preset():
    """env=mujoco_humanoid: presets/mujoco.yaml with presets/mujoco_humanoid.yaml's lr over it (the
    other MuJoCo tasks keep the preset's); the command line still wins."""
    preset, own = raw("presets", "mujoco"), raw("presets", "mujoco_humanoid")
    humanoid, cheetah = compose("env=mujoco_humanoid"), compose("env=mujoco_halfcheetah")
    assert humanoid.algo.lr == own["algo"]["lr"] != preset["algo"]["lr"] == cheetah.algo.lr
    assert dataclasses.replace(humanoid.algo, lr=cheetah.algo.lr) == cheetah.algo
    assert humanoid.sampler == cheetah.sampler
    assert compose("env=mujoco_humanoid", "algo.lr=0.003").algo.lr == 0.003


def test_defend_the_center_starts_from_sample_factorys_init_and_the_command_line_still_wins():
    """env=doom_defend_the_center: presets/doom_defend_the_center.yaml's model.init (with any model);
    the other VizDoom scenarios keep the schema's."""
    own = raw("presets", "doom_defend_the_center")["model"]["init"]
    dtc, basic = compose("env=doom_defend_the_center"), compose("env=doom_health_gathering_supreme")
    assert dtc.model.init == own != basic.model.init == Config().model.init
    assert dataclasses.replace(dtc.model, init=basic.model.init) == basic.model
    assert compose("env=doom_defend_the_center", "model=full").model.init == own
    assert compose("env=doom_defend_the_center", "model.init=orthogonal").model.init == "orthogonal"
