"""Your own environment and model: any gymnasium observation (an image, a Dict of an image, a
categorical and a vector), MultiDiscrete and Tuple actions, env.make factories, a model of one's
own, the Python API and the example files of docs/your-environment.md and docs/your-model.md.

Each kind is a short real training run on a task whose score says the path works end to end:
DictBandit pays 8 only to a policy that reads every key (one blind to any key gets at most 6.7),
PixelTupleBandit only to one that reads both halves of its image and acts through both parts of
its Tuple (at most 6 without either; random: 4)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, compose, missing_dependency, one_error_line, refusal, run_module, summary, train

SMALL = ["env=gym", "model.fc_size=64", "model.hidden_size=64", "sampler.num_workers=2", "sampler.envs_per_worker=4",
         "sampler.rollout=16", "sampler.batch_size=128", "train.status_every_s=5", "algo.lr=0.001"]
DICT = [*SMALL, "env.id=tests.envs:DictBandit-v0", "env.drop_keys=[mission]"]
EXAMPLES = os.path.join(ROOT, "examples")


def test_a_dict_observation_is_stored_as_named_keys_and_packed_into_the_pair():
    from nodes.envs import env_spec, make_env
    cfg = compose(*DICT).env
    spec = env_spec(cfg)
    keys = {k.name: k for k in spec.keys}
    assert list(keys) == ["direction", "image", "vec"]  # gymnasium's order; mission dropped
    assert keys["image"].in_obs and keys["image"].shape == (3, 36, 36) and keys["image"].layout == "hwc"
    assert (keys["direction"].kind, keys["direction"].classes) == ("categorical", 2)
    assert (keys["vec"].start, keys["vec"].stop) == (1, 4)
    assert spec.obs_shape == (3, 36, 36) and spec.obs_dtype == np.uint8 and spec.meas_size == 4
    assert spec.action_heads == (2, 2, 2)
    env = make_env(cfg, seed=3)
    image, vec = env.reset()
    bits = env.env.unwrapped.bits
    assert image.shape == (3, 36, 36) and image[0, 0, 0] == (200 if bits[0] else 30)
    assert vec[0] == bits[1] and (vec[1] > 0) == bool(bits[2])
    env.close()


def test_awkward_spaces_pack_and_encode():
    """Spaces the docs accept and a first version got wrong: a Dict whose one kept key is named
    "obs", keys ModuleDict would refuse as names, a Discrete with a start, a scalar Box, a bool
    MultiBinary, a frame stack (SxHxWxC): each packs into the pair and the keyed model reads it."""
    import gymnasium as gym
    import torch

    from nodes.envs import EnvSpec
    from nodes.envs.observations import Packer, check_observation, keys_of, stored
    from nodes.models.actor_critic import ActorCritic
    S = gym.spaces
    cases = [
        (S.Dict({"obs": S.Box(-1, 1, (4,), np.float32), "action_mask": S.MultiBinary(3)}), ["action_mask"]),
        (S.Dict({"type": S.Box(-1, 1, (), np.float32), "a.b": S.Discrete(3, start=1),
                 "mask": S.MultiBinary(2)}), []),
        (S.Box(0, 255, (4, 36, 36, 3), np.uint8), []),
    ]
    model_cfg = compose("env=gym").model
    for space, drop in cases:
        keys = keys_of(space, "t", drop)
        obs = space.sample()
        if isinstance(space, S.Dict) and "mask" in space.spaces:
            obs["mask"] = obs["mask"].astype(bool)  # gymnasium accepts a bool mask
        check_observation(keys, space, obs, "t")
        packed = Packer(keys)(obs)
        shape, dtype, meas = stored(keys)
        model = ActorCritic(EnvSpec(shape, dtype, (2,), meas_size=meas, keys=keys), model_cfg)
        pair = packed if isinstance(packed, tuple) else (packed, np.zeros(0, np.float32))
        params, _, _ = model.step(torch.as_tensor(np.asarray(pair[0]))[None], torch.as_tensor(pair[1])[None],
                                  torch.zeros(1, model.state_size))
        assert params.shape == (1, 2) and torch.isfinite(params).all()
    assert [k.shape for k in keys] == [(12, 36, 36)]  # the stack's 4 x 3 channels


def test_an_envs_own_objective_reaches_the_episode_end():
    from nodes.envs import make_env
    env = make_env(compose("env=gym", "env.id=tests.envs:ObjectiveBandit-v0").env, seed=0)
    env.reset()
    infos = [env.step(0)[3] for _ in range(8)]
    assert infos[-1] == {"true_objective": 42.0} and all(i == {} for i in infos[:-1])
    env.close()


def test_a_dict_observation_with_multidiscrete_actions_learns_from_every_key(run_dir):
    """Every key reaches the model (a score above what any key's blindness allows), each action head
    reaches the env as MultiDiscrete's int64 array (DictBandit asserts it), and the trained policy
    plays back in launch.enjoy."""
    train(run_dir, *DICT, "train.max_env_frames=50000", timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["mean_episode_reward"] > 7.0, s
    out = run_module("launch.enjoy", f"run_dir={run_dir}", "enjoy.episodes=20", "enjoy.greedy=true").stdout
    assert '"reward_mean": ' in out and float(out.split('"reward_mean": ')[1].split(",")[0]) > 7.0, out


def test_an_image_observation_and_a_tuple_action_learn(run_dir):
    """An HxWxC image alone (no Dict) through the conv stack, and a Tuple action whose discrete and
    continuous parts each reach the env in its own form (PixelTupleBandit asserts it)."""
    train(run_dir, *SMALL, "env.id=tests.envs:PixelTupleBandit-v0", "train.max_env_frames=20000", timeout=240)
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["mean_episode_reward"] > 6.5, s


def test_two_nodes_agree_on_a_dict_env_with_a_model_of_ones_own(tmp_path):
    """examples/own_model.py (its encoder class on examples/own_env.py's Catch, a Dict env) run as a
    user runs it, on two nodes through the Python API, in deterministic mode: both end with the same
    parameters, and the checkpoint says which model it holds: a run with the built-in model refuses
    it by name."""
    small = [o for o in SMALL if o != "env=gym"]
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "own_model.py"), *small, "nodes=2",
                           "train.max_env_frames=6000", "sync.timeout_s=30",
                           "sampler.mode=deterministic", "sync.straggler=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = str(tmp_path / "runs" / "catch_own_model")
    s = summary(run_dir)
    a, b = s["param_checksums"]
    assert s["outcome"] == "finished" and s["nodes"] == 2 and a == b
    from nodes.record import checkpoint as ckpt
    identity = ckpt.load(ckpt.latest(run_dir))["model_identity"]
    assert identity == ("encoder: own_model:CatchEncoder; observation 'paddle': categorical [] of 5 classes; "
                        "observation 'screen': pixels [1, 10, 5]; actions: Discrete(3)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLES, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", *SMALL,
                           "env.make=own_env:make_catch", "train.max_env_frames=12000"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2 and one_error_line(proc).startswith("error: checkpoint ")
    assert "holds another model (checkpoint -> this run): encoder own_model:CatchEncoder -> built-in" in proc.stderr


def test_the_example_scripts_train_through_the_python_api(tmp_path):
    """examples/own_env.py as a user runs it (python examples/own_env.py, from any directory): it
    defines the env it trains, the workers import it as a module, and it evaluates its checkpoint."""
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "own_env.py"), "train.max_env_frames=60000"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = [ln for ln in proc.stdout.splitlines() if ln.startswith("trained ")]
    # a random paddle scores about -0.6; this one caught about 0.3 at 60k frames, all at 200k
    assert trained and float(trained[0].split("reward ")[1].split()[0]) > -0.2, proc.stdout[-2000:]
    assert os.path.isfile(tmp_path / "runs" / "catch" / "summary.json")
    assert any(ln.startswith("evaluated: ") for ln in proc.stdout.splitlines())


BAD = [
    (["env.id=tests.envs:DictBandit-v0"],
     "error: env.id 'tests.envs:DictBandit-v0': observation key 'mission' is Text, which no encoder takes: drop it "
     "with env.drop_keys=[mission]"),
    (["env.id=tests.envs:DictBandit-v0", "env.drop_keys=[goal]"],
     "error: env.drop_keys: 'goal' is not a key of env.id 'tests.envs:DictBandit-v0''s observation "
     "(keys: direction, image, mission, vec)"),
    (["env.id=tests.envs:LyingObs-v0"],
     "error: env.id 'tests.envs:LyingObs-v0': reset() gave key 'vec' (5,) float32, its space declares (4,) float32"),
    (["env.make=tests.envs:make_dict_bandit", "+env.kwargs.raise_error=true"],
     "error: env.make 'tests.envs:make_dict_bandit' raised ValueError: no such level"),
    (["env.make=tests.envs:no_such_factory"],
     "error: env.make 'tests.envs:no_such_factory': module 'tests.envs' has no function 'no_such_factory'"),
    (["env.make=tests.nowhere:make"],
     "error: cannot import 'tests.nowhere' for env.make 'tests.nowhere:make': No module named 'tests.nowhere'"),
    ([*DICT[1:], "model.encoder=tests.models:WrongSize"],
     "error: model.encoder 'tests.models:WrongSize' declares out_size=32 but its forward gave (2, 16) for a batch of "
     "2 (expected (2, 32))"),
    ([*DICT[1:], "model.encoder=tests.models:Nowhere"],
     "error: model.encoder 'tests.models:Nowhere': module 'tests.models' has no 'Nowhere'"),
    ([*DICT[1:], "model.encoder=nature"],
     None),  # a 36x36 image fits the nature stack too: accepted
    (["env.id=tests.envs:TinyImage-v0", "model.encoder=conv"],
     "error: model.encoder=conv needs images its conv stack can take; key 'obs' is 7x7: use model.encoder=auto "
     "(an MLP over a small image's pixels) or a model of your own"),
]


@pytest.mark.parametrize("overrides,line", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_envs_and_models_are_refused_in_one_line_before_anything_starts(overrides, line):
    argv = ["env=gym", *overrides]
    if line is None:
        from launch.cli.app import check
        check(compose(*argv))
        return
    assert refusal(*argv) == line


def _installed(module: str) -> None:
    import importlib.util
    if importlib.util.find_spec(module) is None:
        missing_dependency(f"{module} is not installed: pip install -e '.[envs]' (the project's clone)")


def test_minigrid_trains_from_its_registered_id(run_dir):
    """MiniGrid (a Dict of a 7x7x3 uint8 grid, a direction and a text mission) through env.id, no
    wrapper of ours: the grid too small for the conv stack goes through an MLP; the run trains and
    its checkpoint plays in launch.enjoy. Its learning figure: docs/your-environment.md."""
    _installed("minigrid")
    args = [*SMALL, "env.id=minigrid:MiniGrid-Empty-5x5-v0", "env.drop_keys=[mission]"]
    from nodes.envs import env_spec
    keys = {k.name: k for k in env_spec(compose(*args).env).keys}
    assert keys["image"].shape == (3, 7, 7) and keys["direction"].classes == 4 and "mission" not in keys
    train(run_dir, *args, "train.max_env_frames=2000", timeout=240)
    assert summary(run_dir)["outcome"] == "finished"


def test_crafter_is_made_by_the_example_factory():
    """Crafter (the old gym API) made gymnasium by examples/crafter_env.py's factory: a 64x64x3 image
    and 17 actions; its episodes end as terminated at death."""
    _installed("crafter")
    sys.path.insert(0, EXAMPLES)
    try:
        from nodes.envs import check_env_config, make_env
        cfg = compose("env=gym", "env.make=crafter_env:make_crafter").env
        spec = check_env_config(cfg)
        assert spec.obs_shape == (3, 64, 64) and spec.action_heads == (17,) and spec.keys[0].layout == "hwc"
        env = make_env(cfg, seed=0)
        obs = env.reset()
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        obs, reward, done, info = env.step(0)
        assert obs.shape == (3, 64, 64) and not done
        env.close()
    finally:
        sys.path.remove(EXAMPLES)
