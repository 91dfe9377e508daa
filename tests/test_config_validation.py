"""Bad input is refused with one clear line (exit code 2) before any worker process starts."""
import os

import pytest
from helpers import refusal, run_module

CASES = [
    (["env=doom_nosuch"], "unknown env 'doom_nosuch' (available:"),
    (["sampler.envs_per_worker=7"], "sampler.envs_per_worker must be even with sampler.double_buffered=true"),
    (["sampler.batch_size=1000"], "sampler.batch_size (1000) must be a positive multiple of sampler.rollout (32)"),
    (["algo.lr=0"], "algo.lr must be > 0, got 0.0"),
    (["model.fc_layers=0"], "model.fc_layers must be >= 1, got 0"),
    (["model.obs_norm_eps=0"], "model.obs_norm_eps must be > 0, got 0.0"),
    (["model.encoder=dqn"],
     "model.encoder must be auto, conv, nature, impala, mlp or pkg.module:Class (your own), got 'dqn'"),
    (["algo.lr=-1e-4"], "algo.lr must be > 0"),
    (["sync.grad_dtype=fp16"], "sync.grad_dtype must be fp32 or bf16, got 'fp16'"),
    (["sync.global_batch=maybe"], "sync.global_batch must be true, false or auto, got 'maybe'"),
    (["algo.lr_schedule=cosine"], "algo.lr_schedule must be constant or linear, got 'cosine'"),
    (["algo.lr_scaling=square"], "algo.lr_scaling must be one of none, sqrt, linear, got 'square'"),
    (["algo.lr_schedule=linear", "train.max_env_frames=0"],
     "algo.lr_schedule=linear decays the lr to 0 at train.max_env_frames: set it (> 0)"),
    (["algo.value_clip=-0.2"], "algo.value_clip must be >= 0 (0: off), got -0.2"),
    (["algo.exploration_loss=kl"], "algo.exploration_loss must be one of entropy, symmetric_kl, got 'kl'"),
    (["algo.epochs=0"], "algo.epochs must be >= 1, got 0"),
    (["algo.minibatches=33"], "algo.minibatches must be between 1 and the trajectories a node learns on in a "
                              "batch (sampler.batch_size / sampler.rollout = 32), got 33"),
    # a node learns on its share of the world's batch: 16 minibatches of 8 trajectories were 8 empty ones
    (["nodes=4", "algo.minibatches=16"], "algo.minibatches must be between 1 and the trajectories a node learns "
     "on in a batch (a node's share of sampler.batch_size over 4 nodes / sampler.rollout = 8), got 16"),
    (["sampler.mode=sync", "sampler.num_workers=1", "sampler.envs_per_worker=4", "algo.minibatches=8"],
     "(sampler.num_workers x sampler.envs_per_worker: a round of every env = 4), got 8"),
    (["algo.kl_coeff=-0.1"], "algo.kl_coeff must be >= 0 (0: off), got -0.1"),
    (["model.action_std=0"], "model.action_std must be > 0 (the continuous actions' std at the start), got 0.0"),
    (["model.mlp_activation=sigmoid"], "model.mlp_activation must be elu, tanh or relu, got 'sigmoid'"),
    (["model.init=xavier"], "model.init must be orthogonal, orthogonal_heads or torch_default, got 'xavier'"),
    (["nodes=0"], "nodes must be >= 1, got 0"),
    (["seed=-3"], "seed must be >= 0"),
    (["env=gym", "env.id=NoSuchEnv-v0"], "unknown gymnasium env id 'NoSuchEnv-v0'"),
    (["env=doom_basic", "env.id=nosuch.cfg"], "VizDoom scenario 'nosuch.cfg' is not bundled with vizdoom"),
    (["sampler.mode=bogus"], "sampler.mode must be one of async, sync, deterministic"),
    (["sampler.num_workers=abc"], "sampler.num_workers must be an integer >= 1 or auto, got 'abc'"),
    (["sampler.policy_device=gpu"], "sampler.policy_device must be cpu, cuda or cuda:N, got 'gpu'"),
    (["sampler.nosuch=1"], "unknown config key 'sampler.nosuch'"),
    (["sampler.num_slots=20"],
     "sampler.num_slots (20) must be 0 (auto) or at least envs (16) + batch_size/rollout (32)"),
    # elastic membership (sync/rendezvous.py)
    (["nodes=2", "sync.min_nodes=3"], "sync.min_nodes (3) must be <= nodes (2)"),
    (["nodes=2", "sync.min_nodes=0"], "sync.min_nodes must be >= 1, got 0"),
    (["nodes=3", "sync.max_nodes=2"], "sync.max_nodes must be 0 (no bound) or >= nodes (3), got 2"),
    (["nodes=2", "sync.settle_s=0"], "sync.settle_s must be > 0, got 0.0"),
    # populations (nodes/population/, nodes/config/population.py)
    (["population.size=17"], "population.size=17 is more than the 16 envs of a rank can serve"),
    (["population.size=2", "pbt.objective=elo"], "pbt.objective must be one of reward, true_objective, win, got 'elo'"),
    (["population.size=2", "pbt.objective=win"], "pbt.objective=win ranks members by their match win rate"),
    (["population.size=2", "sampler.mode=sync"], "population.size=2 needs sampler.mode=async"),
    (["population.size=2", "population.assign=random"], "population.assign must be one of fixed, episode"),
    (["population.size=2", "pbt.mutate=[gamma]"], "pbt.mutate: each must be one of lr, entropy_coeff, shaping"),
    (["population.snapshots=2"], "population.snapshots are self-play opponents: env=doom_basic has no match"),
    (["env=doom_duel", "population.snapshots=1", "sampler.mode=sync"],
     "population.snapshots=1 needs sampler.mode=async"),
    (["population.size=2", "sampler.num_slots=60"],
     "sampler.num_slots (60) must be 0 (auto) or at least envs (16) + batch_size/rollout (32) x population.size (2)"),
    # a mistyped name: the closest one named
    (["train.max_env_frame=100"], "unknown config key 'train.max_env_frame': did you mean 'train.max_env_frames'?"),
    (["env=doom_basics"], "unknown env 'doom_basics': did you mean 'doom_basic'? (available: atari,"),
    (["env=gym", "env.id=CartPol-v1"], "unknown gymnasium env id 'CartPol-v1': did you mean 'CartPole-v1'?"),
    (["env=doom_basic", "env.id=basc.cfg"],
     "VizDoom scenario 'basc.cfg' is not bundled with vizdoom: did you mean 'basic.cfg'? ("),
    # a shipped encoder the env's observation does not fit: refused here, not at the first forward
    (["env=doom_basic", "model.encoder=mlp"], "model.encoder=mlp cannot read this env's observation, a 3x72x128 "
     "image: an image takes model.encoder=auto, conv, nature or impala (RuntimeError: mat1 and mat2 shapes"),
    (["env=gym", "env.id=CartPole-v1", "model.encoder=impala"], "model.encoder=impala cannot read this env's "
     "observation, a vector of 4: a vector takes model.encoder=auto or mlp (RuntimeError: "),
]


@pytest.mark.parametrize("overrides,message", CASES, ids=[c[0][-1] for c in CASES])
def test_bad_value_is_one_clear_line(overrides, message):
    """Each case through the check `python -m launch.train` runs first, in this process; the three
    below go through the real command."""
    assert message in refusal("hydra.run.dir=/nonexistent/run", *overrides)


# one refusal of each kind (an unknown key before composing, a bad value, a bad env) as a user meets
# it: the command's exit code and stderr, and nothing written
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[23]], ids=lambda c: c[0][-1])
def test_the_command_refuses_before_writing_anything(tmp_path, case):
    overrides, message = case
    run_dir = str(tmp_path / "run")
    proc = run_module("launch.train", f"hydra.run.dir={run_dir}", *overrides, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and message in lines[0], lines[0]
    assert not os.path.exists(run_dir)  # no config.yaml, checkpoint, summary or worker directory


def test_envs_per_worker_odd_is_fine_without_double_buffering(tmp_path):
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", "env=gym", "sampler.envs_per_worker=3",
                      "sampler.double_buffered=false", "train.max_env_frames=64", "sampler.batch_size=32",
                      "sampler.rollout=16", "model.hidden_size=16", "model.fc_size=16", timeout=180)
    assert proc.returncode == 0


def test_an_integral_float_is_the_integer_on_every_path():
    """Users write 1e6: an integral float given to an integer key is that integer on the command
    line (the argv check_command hands to Hydra, a sweep's values too), through the Python API and in
    launch.enjoy's options; a fraction is refused in one line, the same on each path."""
    import launch.enjoy  # noqa: F401 - registers launch.enjoy's options
    from launch import api
    from launch.cli.app import check
    from launch.cli.overrides import check_command, compose_checked
    from nodes.errors import ConfigError
    argv = ["-m", "train.max_env_frames=1e6", "sampler.envs_per_worker=1.6e1", "seed=0,1e1", "algo.lr=1e-4"]
    assert check_command(argv, check) == ["-m", "train.max_env_frames=1000000", "sampler.envs_per_worker=16",
                                          "seed=0,10", "algo.lr=1e-4"]
    cfg = api.config("train.max_env_frames=1.5e3", "sampler.num_workers=1e0")
    assert (cfg.train.max_env_frames, cfg.sampler.num_workers) == (1500, 1)
    assert type(cfg.train.max_env_frames) is int and type(cfg.sampler.num_workers) is int
    assert compose_checked("enjoy", ["enjoy.episodes=1e2"]).enjoy.episodes == 100
    line = "error: bad value for sampler.envs_per_worker: 2.5 is not a whole number"
    assert refusal("sampler.envs_per_worker=2.5") == line
    with pytest.raises(ConfigError) as refused:
        api.config("sampler.envs_per_worker=2.5")
    assert str(refused.value) == line.removeprefix("error: ")


def test_the_command_hands_hydra_the_integer(tmp_path):
    """Hydra composes the command line again after the check: it gets 1500 for 1.5e3 (--cfg job
    prints the config and trains nothing)."""
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", "train.max_env_frames=1.5e3", "--cfg", "job",
                      timeout=120)
    assert "max_env_frames: 1500\n" in proc.stdout, proc.stdout[-2000:]
