"""Every VizDoom scenario in conf/env/ resets and steps through the real engine with the
observation and action spaces its config promises; multi-head actions, measurements and reward
shaping do what the config says."""
import glob
import os

import numpy as np
import pytest
from helpers import ROOT, group_conf

from nodes.envs import check_env_config, env_spec, make_env
from nodes.envs.doom import action_heads
from nodes.errors import ConfigError

# every option but the matches between agents (one engine per player: tests/test_doom_agents.py)
SCENARIOS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ROOT, "conf", "env", "doom_*.yaml"))
                   if group_conf("env", os.path.basename(p)[:-5]).agents == 1)


def load(name, **over):
    return group_conf("env", name, **over)


def random_action(spec, rng):
    a = [int(rng.integers(n)) for n in spec.action_heads]
    return a[0] if len(a) == 1 else a


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
    assert spec.obs_shape == (3, 72, 128) and cfg.frameskip == 4
    env = make_env(cfg, seed=1)
    try:
        # the promised spaces, read back from the engine itself
        n_buttons = len(env.game.get_available_buttons())
        if cfg.actions == "single":
            assert spec.action_heads == (n_buttons + 1,)
        else:
            assert len(spec.action_heads) > 1
        assert spec.meas_size == (len(env.game.get_available_game_variables()) if cfg.measurements else 0)
        obs = env.reset()
        pixels, meas = obs if cfg.measurements else (obs, np.zeros(0, np.float32))
        assert pixels.shape == spec.obs_shape and pixels.dtype == np.uint8 and pixels.std() > 0  # a rendered frame
        assert meas.shape == (spec.meas_size,) and meas.dtype == np.float32
        if cfg.measurements:
            assert np.array_equal(meas, env.game.get_state().game_variables.astype(np.float32))
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs, reward, done, info = env.step(random_action(spec, rng))
            assert isinstance(reward, float)
            if done:
                obs = env.reset()
            pixels, meas = obs if cfg.measurements else (obs, np.zeros(0, np.float32))
            assert pixels.shape == spec.obs_shape and meas.shape == (spec.meas_size,)
    finally:
        env.close()


def test_deathmatch_heads_are_the_seed_decomposition():
    import vizdoom as vzd

    from nodes.envs.doom import scenario_path
    game = vzd.DoomGame()
    game.load_config(scenario_path(load("doom_deathmatch")))
    heads = dict(action_heads(game.get_available_buttons()))
    assert list(heads) == ["move", "strafe", "attack", "sprint", "weapon", "turn"]
    assert [len(m) for m in heads.values()] == [3, 3, 2, 2, 7, 11]
    for m in heads.values():  # option 0 of every head presses nothing; the others press something
        assert not m[0].any() or m is heads["turn"]
        assert all(row.any() for row in m[1:]) or m is heads["turn"]
    # heads press disjoint buttons, so their sum is a valid combined action
    pressed = [set(np.flatnonzero(np.abs(m).sum(0))) for m in heads.values()]
    assert sum(len(p) for p in pressed) == len(set().union(*pressed))


def test_frameskip_2_takes_half_the_tics(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tics = {}
    for skip in (4, 2):
        env = make_env(load("doom_basic", frameskip=skip), seed=1)
        env.reset()
        start = env.game.get_episode_time()
        env.step(0)
        tics[skip] = env.game.get_episode_time() - start
        env.close()
    assert tics == {4: 4, 2: 2}


def test_reward_shaping_adds_weighted_variable_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load("doom_defend_the_center", actions="single", shaping={"AMMO2": 0.5, "HEALTH": 0.1})
    env = make_env(cfg, seed=3)
    try:
        (_, meas) = env.reset()
        fired = False
        for _ in range(200):
            before = meas
            obs, reward, done, info = env.step(3)  # ATTACK: spends ammo
            if done:
                break
            meas = obs[1]
            expect = reward + 0.5 * (meas[0] - before[0]) + 0.1 * (meas[1] - before[1])
            assert info["train_reward"] == pytest.approx(expect)
            fired |= meas[0] < before[0]
        assert fired, "attacking never spent ammo: the shaping was not exercised"
    finally:
        env.close()


def test_measurements_on_a_scenario_without_variables_is_one_line():
    with pytest.raises(ConfigError, match="defines no game variables"):
        check_env_config(load("doom_my_way_home", measurements=True))


def test_unknown_shaping_variable_is_one_line():
    with pytest.raises(ConfigError, match="not a VizDoom game variable"):
        check_env_config(load("doom_basic", shaping={"HEALTHY": 1.0}))


def engines() -> list[int]:
    """This process's VizDoom engine processes (its children running the vizdoom binary)."""
    from nodes.janitor import descendants
    out = []
    for pid in descendants(os.getpid())[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"vizdoom" in f.read().split(b"\0")[0]:
                    out.append(pid)
        except OSError:
            pass
    return out


def play(env, episodes: int, steps: int = 3) -> list[np.ndarray]:
    """The first frame of each of `episodes` short episodes (a few fixed actions each)."""
    frames = []
    for _ in range(episodes):
        obs = env.reset()
        frames.append(obs[0].copy())
        for t in range(steps):
            if env.step(t % 4)[2]:
                break
    return frames


def test_engine_restarts_every_n_episodes_replacing_its_process(tmp_path, monkeypatch):
    """VizDoom's engine keeps memory per episode: every env.restart_episodes resets the env closes it
    and starts a fresh one; one engine process at any time, none left behind, and the env plays on."""
    monkeypatch.chdir(tmp_path)
    before = set(engines())
    env = make_env(load("doom_basic", restart_episodes=3), seed=5)
    try:
        first = set(engines()) - before
        assert len(first) == 1
        frames = play(env, 7)  # resets 3 and 6 restart the engine
        assert env.restarts == 2
        now = set(engines()) - before
        assert len(now) == 1 and now != first, "the engine process was not replaced"
        assert all(f.shape == (3, 72, 128) and f.std() > 0 for f in frames)
    finally:
        env.close()
    assert set(engines()) == before


def test_restarted_engines_replay_the_same_episodes_for_the_same_seed(tmp_path, monkeypatch):
    """The fresh engine's seed comes from the env's seed and the restart count: a run with restarts
    is reproducible; a different env seed gives different episodes (doom_basic spawns its target at
    a random place, so the first frames differ)."""
    monkeypatch.chdir(tmp_path)
    runs = []
    for seed in (5, 5, 6):
        env = make_env(load("doom_basic", restart_episodes=2), seed=seed)
        try:
            runs.append(play(env, 6))
        finally:
            env.close()
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))


def test_negative_restart_episodes_is_one_line():
    with pytest.raises(ConfigError, match="restart_episodes must be >= 0"):
        check_env_config(load("doom_basic", restart_episodes=-1))


def test_health_gathering_is_sample_factorys_spec(tmp_path, monkeypatch):
    """Four buttons and a no-op, 0.01 of game reward a tic alive and nothing at death (so the
    score is tics survived / 100, Sample Factory's true objective), +0.04 of training reward per
    health point gained: played at random to the end, the score is exactly 0.01 x the episode's
    tics and the training reward exceeds it by 0.04 x the health picked up."""
    monkeypatch.chdir(tmp_path)
    cfg = load("doom_health_gathering")
    assert env_spec(cfg).action_heads == (5,)
    env = make_env(cfg, seed=2)
    rng = np.random.default_rng(2)
    try:
        (_, meas) = env.reset()
        score = shaped = gained = 0.0
        done = False
        while not done:
            obs, reward, done, info = env.step(int(rng.integers(5)))
            score += reward
            shaped += info["train_reward"]
            if not done:
                gained += max(float(obs[1][0] - meas[0]), 0.0)
                meas = obs[1]
        tics = env.game.get_episode_time() - 1  # the engine counts from 1
        assert env.game.is_player_dead()  # random play dies in the acid: no -100 for it
        assert score == pytest.approx(0.01 * tics, abs=0.011)
        assert shaped - score == pytest.approx(0.04 * gained, abs=1e-3) and gained > 0
    finally:
        env.close()


def test_a_living_reward_that_is_no_number_is_one_line():
    with pytest.raises(ConfigError, match="env.living_reward must be a number"):
        check_env_config(load("doom_health_gathering", living_reward="lots"))


# Sample Factory 2.1.1's action space for each scenario (sf_examples/vizdoom/doom/doom_utils.py):
# one Discrete(1 + buttons) head, or its heads; ours names heads, the sizes must be its
SF_ACTIONS = {
    "doom_basic": {"single": 4},  # Discrete(1 + 3)
    "doom_defend_the_center": {"turn": 3, "attack": 2},  # doom_turn_and_attack_only
    "doom_defend_the_line": {"turn": 3, "attack": 2},
    "doom_my_way_home": {"turn": 3, "move": 3},  # doom_action_space_basic
    "doom_deadly_corridor": {"turn": 3, "move": 3, "strafe": 3, "attack": 2},  # doom_action_space_extended
    "doom_health_gathering": {"single": 5},  # Discrete(1 + 4)
    "doom_health_gathering_supreme": {"single": 5},
}


@pytest.mark.parametrize("name", sorted(SF_ACTIONS))
def test_scenarios_have_sample_factorys_action_space(name):
    """The scenarios Sample Factory defines take its action space: the heads, their sizes, and the
    buttons under them (a config that named a button the .cfg lacks would lose a head here)."""
    from nodes.envs.doom import _game

    cfg = load(name)
    check_env_config(cfg)
    if cfg.actions == "single":
        heads = {"single": env_spec(cfg).action_heads[0]}
    else:
        heads = {head: len(options) for head, options in action_heads(_game(cfg).get_available_buttons())}
    assert heads == SF_ACTIONS[name]
    assert env_spec(cfg).action_heads == tuple(heads.values())


def test_render_hud_draws_the_status_bar_into_the_frames(tmp_path, monkeypatch):
    """env.render_hud=true (Sample Factory's .cfg variants of defend_*): the bottom rows of the
    first frame change (the status bar); the rest of the view is the same scene."""
    monkeypatch.chdir(tmp_path)
    assert load("doom_defend_the_center").render_hud is True  # Sample Factory's .cfg draws it
    frames = {}
    for hud in (False, True):
        env = make_env(load("doom_defend_the_center", render_hud=hud, measurements=False), seed=4)
        try:
            frames[hud] = env.reset().astype(np.int16)
        finally:
            env.close()
    bottom = slice(-8, None)  # the status bar is the bottom ~1/6 of the screen
    assert np.abs(frames[True][:, bottom] - frames[False][:, bottom]).mean() > 5


def test_render_screen_flashes_tints_the_frame_red_when_the_player_is_hurt(tmp_path, monkeypatch):
    """env.render_screen_flashes=true (the engine's default, which Sample Factory's .cfg keeps; the
    bundled defend_the_center.cfg turns it off): standing still, the same seed brings the same
    monsters; at the first step that costs health, the frame with flashes is redder than the one
    without, and before it the two are the same."""
    monkeypatch.chdir(tmp_path)
    envs = {f: make_env(load("doom_defend_the_center", render_screen_flashes=f, measurements=True), seed=4)
            for f in (False, True)}
    try:
        obs = {f: env.reset() for f, env in envs.items()}
        health = lambda o: float(o[1][1])  # noqa: E731 - the .cfg's variables: AMMO2, HEALTH
        for _ in range(200):
            before = health(obs[False])
            assert np.array_equal(obs[False][0], obs[True][0])  # nothing hurt yet: the same scene
            obs = {f: env.step([0, 0])[0] for f, env in envs.items()}
            if health(obs[False]) < before:
                break
        else:
            pytest.fail("no monster hurt the player in 200 steps")
        red = lambda o: float(o[0][0].astype(np.int16).mean() - o[0][2].astype(np.int16).mean())  # noqa: E731
        assert red(obs[True]) > red(obs[False]) + 10
    finally:
        for env in envs.values():
            env.close()


@pytest.mark.parametrize("key", ["render_hud", "render_screen_flashes"])
def test_a_render_switch_that_is_no_bool_is_one_line(key):
    with pytest.raises(ConfigError, match=f"env.{key} must be true, false or null"):
        check_env_config(load("doom_basic", **{key: "yes"}))
