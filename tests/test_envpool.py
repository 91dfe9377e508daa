"""The EnvPool backend (env.backend=envpool, nodes/envs/envpool_env.py): an Atari game's observations,
rewards, lives and episode ends are the python backend's (up to the resize's rounding), gym tasks
step, reset and time out as the python backend's do, a MuJoCo run trains through it and is
reproducible bit for bit whatever the layout, and what it cannot run is refused in one line."""
import re

import numpy as np
import pytest
from helpers import compose, group_conf, missing_dependency, one_error_line, summary, train

from nodes.envs import check_env_config, make_env, make_envs
from nodes.errors import ConfigError

try:
    import envpool  # noqa: F401
    ENVPOOL_MISSING = None
except ImportError as exc:
    ENVPOOL_MISSING = f"envpool is not installed ({exc}): pip install -e '.[envpool]'"


@pytest.fixture(autouse=True)
def _needs_envpool():
    if ENVPOOL_MISSING:
        missing_dependency(ENVPOOL_MISSING)


def pool_slots(cfg, groups, seed=7):
    return make_envs(cfg, sum(len(g) for g in groups), lambda i: seed + i, groups)


def test_atari_observations_rewards_and_lives_are_the_python_backends():
    # one no-op after a reset (the count is each backend's own random draw above 1), lives and clipping on
    cfg = group_conf("env", "atari_breakout", noop_max=1, backend="envpool")
    assert cfg.episodic_life and cfg.clip_rewards
    ours = make_env(cfg, seed=7)
    slots = pool_slots(cfg, [[0, 1]])  # a pool of two: env 0 is compared, env 1 plays on beside it
    rng = np.random.default_rng(0)
    try:
        a, b = ours.reset(), slots[0].reset()
        slots[1].reset()
        life_losses = games = 0
        worst = 0.0
        for _ in range(1500):
            action, other = (int(x) for x in rng.integers(4, size=2))
            slots[0].submit(action)
            slots[1].submit(other)
            a, ra, da, ia = ours.step(action)
            b, rb, db, ib = slots[0].step(action)
            ob, _, dother, iother = slots[1].step(other)
            assert (ra, da, ia) == (rb, db, ib)
            if da and not ia.get("episode_end", True):
                life_losses += 1
            elif da:
                assert a is None and b is None
                games += 1
                a, b = ours.reset(), slots[0].reset()
            if dother and iother.get("episode_end", True):
                slots[1].reset()
            assert a.shape == b.shape == (4, 84, 84) and a.dtype == b.dtype == np.uint8
            diff = np.abs(a.astype(int) - b.astype(int))
            assert diff.max() <= 1  # OpenCV's INTER_AREA rounds a few pixels the other way
            worst = max(worst, float((diff > 0).mean()))
        assert life_losses >= 4 and games >= 2, (life_losses, games)
        assert worst < 0.01, worst
    finally:
        ours.close()
        for s in slots:
            s.close()


def test_gym_tasks_step_reset_and_time_out_as_the_python_backend_does():
    cfg = group_conf("env", "gym", id="Pendulum-v1", backend="envpool")
    slots = pool_slots(cfg, [[0, 1, 2]])
    try:
        for s in slots:
            obs = s.reset()
            assert obs.shape == (3,) and obs.dtype == np.float32
        for t in range(200):  # Pendulum-v1's time limit
            for s in slots:
                s.submit(np.array([5.0], np.float32))  # outside the bounds: clipped to 2.0
            results = [s.step(None) for s in slots]
            if t < 199:
                assert all(not done and obs.dtype == np.float32 for obs, _, done, _ in results)
        assert all(obs is None and done and info == {"truncated": True} for obs, _, done, info in results)
        assert all(s.reset().shape == (3,) for s in slots)
    finally:
        for s in slots:
            s.close()
    # env.rescale_actions: the spec in the policy's units (-1..1), the pool given Pendulum's own (+-2)
    scaled = group_conf("env", "gym", id="Pendulum-v1", backend="envpool", rescale_actions=True)
    slots = pool_slots(scaled, [[0, 1]])
    try:
        assert slots[0].spec.action_low == (-1.0,) and slots[0].spec.action_high == (1.0,)
        for s in slots:
            s.reset()
        slots[0].submit(np.array([0.5], np.float32))
        slots[1].submit(np.array([-5.0], np.float32))  # clipped to -1 in units: -2 for the task
        assert slots[0].pool.actions.tolist() == [[1.0], [-2.0]]
    finally:
        for s in slots:
            s.close()
    cart = group_conf("env", "gym", id="CartPole-v1", backend="envpool")
    slot = pool_slots(cart, [[0]])[0]
    slot.reset()
    steps, done = 0, False
    while not done and steps < 100:
        slot.submit(0)  # always left: the pole falls within a few dozen steps
        obs, reward, done, info = slot.step(0)
        steps += 1
    assert done and steps < 100 and obs is None and info.get("truncated") is None and reward == 1.0
    assert slot.reset().dtype == np.float32
    slot.close()


def test_a_mujoco_run_through_envpool_trains_and_is_identical_whatever_the_layout(tmp_path):
    # 1 worker x 8 envs (pools of 4) against 2 x 4 (pools of 2): each env seeded by itself
    det = ["env=mujoco_hopper", "env.backend=envpool", "sampler.mode=deterministic", "sampler.rollout=16",
           "sampler.envs_per_worker=8", "train.max_env_frames=1200", "train.learner_threads=1",
           "train.status_every_s=1", "algo.epochs=2", "algo.minibatches=2"]
    train(tmp_path / "1x8", *det, "sampler.num_workers=1", timeout=180)
    train(tmp_path / "2x4", *det, "sampler.num_workers=2", "sampler.envs_per_worker=4", timeout=180)
    a, b = summary(tmp_path / "1x8"), summary(tmp_path / "2x4")
    assert a["outcome"] == b["outcome"] == "finished" and a["policy_version"] == b["policy_version"] >= 8
    assert a["env_frames"] == b["env_frames"] >= 1200
    assert a["param_checksums"] == b["param_checksums"]


@pytest.mark.parametrize("overrides, message", [
    (["env=doom_basic"], "env.backend=envpool runs env families atari, gym, not 'doom' (env=doom_basic): "
                         "use env.backend=python"),
    (["env=gym", "env.id=tests.envs:SignBandit-v0"], "EnvPool has no task 'tests.envs:SignBandit-v0'"),
    (["env=atari_pong", "env.noop_max=0"], "env.backend=envpool plays 1..env.noop_max no-ops"),
    (["env=atari_breakout", "env.fire_reset=true"], "env.fire_reset=true is done by the python backend only"),
    (["env=mujoco_hopper", "env.frameskip=2"], "env.backend=envpool steps gym tasks with env.frameskip=1, got 2"),
])
def test_what_envpool_cannot_run_is_refused_before_anything_starts(overrides, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        check_env_config(compose(*overrides, "env.backend=envpool").env)


def test_a_bad_backend_exits_2_in_one_line(run_dir):
    proc = train(run_dir, "env.backend=cpp", check=False, timeout=60)
    assert proc.returncode == 2
    assert one_error_line(proc) == "error: env.backend must be python or envpool, got 'cpp'"

