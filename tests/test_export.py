"""A trained policy leaves the trainer: its step exported as ONNX and TorchScript computes what the
model computes, on observations recorded from real envs over 100 recurrent steps (a VizDoom GRU
model, a MuJoCo Gaussian model, a Dict-observation LSTM model with MultiDiscrete actions);
launch.export writes the folder from a run, launch.enjoy plays it from the folder and from the
Hugging Face cache (hf://user/name, offline), examples/play_onnx.py plays it without torch, and
what cannot be exported is refused in one line."""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT, compose, missing_dependency, one_error_line, run_module

from launch import api
from launch.process.resolved import write_resolved
from launch.share.card import model_card
from launch.share.export import ExportError, to_onnx, to_torchscript, write_export
from launch.share.parity import TOLERANCE, compare
from nodes.envs import action_converter, env_spec, env_workdir, make_env
from nodes.envs.observations import Packer
from nodes.errors import ConfigError
from nodes.models.actor_critic import ActorCritic
from nodes.models.deploy import DeployedPolicy
from nodes.models.normalisers import RunningNorm
from nodes.record import checkpoint as ckpt


@pytest.fixture(autouse=True, scope="module")
def _export_extra():
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as exc:
        missing_dependency(f"the export extra is not installed ({exc}): pip install -e '.[export]'")


CASES = {
    "vizdoom_gru": ["env=doom_basic"],
    "mujoco_gaussian": ["env=mujoco_halfcheetah"],
    "dict_lstm": ["env=gym", "env.id=tests.envs:DictBandit-v0", "env.drop_keys=[mission]", "model.core=lstm",
                  "model.fc_size=64", "model.hidden_size=32"],
}
STEPS = 100


def recorded(cfg, spec, steps: int, seed: int = 0):
    """`steps` observations of the real env under random actions, as the graph takes them (by input
    name: the env's own keys for a Dict, the wrapper's pair otherwise), and where episodes start."""
    rng = np.random.default_rng(seed)
    out, starts = [], []
    with env_workdir(cfg.env, cfg.run_dir, "export_test"):
        env = make_env(cfg.env, seed)
        raw = env.env if spec.keys else None  # a Dict env: its observations as gymnasium gives them
        if raw:
            raw.action_space.seed(seed)
        try:
            obs, start = (raw.reset(seed=seed)[0] if raw else env.reset()), True
            for _ in range(steps):
                if spec.keys:
                    out.append({k.name: np.asarray(obs[k.name])[None].astype(
                        np.int64 if k.kind == "categorical" else np.uint8 if k.kind == "pixels" else np.float32)
                        for k in spec.keys})
                elif spec.meas_size:
                    out.append({"obs": np.asarray(obs[0])[None], "meas": np.asarray(obs[1], np.float32)[None]})
                else:
                    out.append({"obs": np.asarray(obs, spec.obs_dtype)[None]})
                starts.append(start)
                if raw:
                    obs, _, term, trunc, _ = raw.step(raw.action_space.sample())
                    done = term or trunc
                    obs = raw.reset()[0] if done else obs
                else:
                    row = np.array([rng.integers(n) for n in spec.action_heads] + [0.0] * spec.continuous, np.float32)
                    obs, _, done, _ = env.step(action_converter(spec)(row))
                    obs = env.reset() if done else obs
                start = bool(done)
        finally:
            env.close()
    return out, starts


def model_of(cfg):
    """A model with trained-looking normaliser statistics, so that normalisation is compared too."""
    model = ActorCritic(env_spec(cfg.env), cfg.model).eval()
    torch.manual_seed(1)
    for norm in model.modules():
        if isinstance(norm, RunningNorm):
            norm.mean.normal_(0.0, 3.0)
            norm.var.uniform_(0.5, 40.0)
    return model


@pytest.fixture(scope="module")
def doom(tmp_path_factory, _export_extra):
    """A doom_basic model (random weights) as a run directory with a checkpoint, and its export
    folder written by write_export (ONNX, TorchScript, safetensors, config, card)."""
    run_dir = str(tmp_path_factory.mktemp("doom_run"))
    cfg = compose(*CASES["vizdoom_gru"], run_dir=run_dir)
    model = model_of(cfg)
    state = {"model": model.state_dict(), "policy_version": 7, "env_frames": 7168, "model_identity": model.identity()}
    write_resolved(cfg)
    ckpt.save(run_dir, state, keep=1)
    folder = os.path.join(run_dir, "export")
    write_export(folder, cfg, model, state, ckpt.latest(run_dir), card=model_card(cfg, state, run_dir, "both"))
    return cfg, model, folder


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_and_torchscript_match_the_model_over_100_recurrent_steps_of_a_real_env(case, tmp_path, request):
    if case == "vizdoom_gru":  # the export folder's own files
        cfg, model, folder = request.getfixturevalue("doom")
        onnx_path, ts_path = os.path.join(folder, "policy.onnx"), os.path.join(folder, "policy.ts")
    else:
        cfg = compose(*CASES[case], run_dir=str(tmp_path))
        model = model_of(cfg)
        onnx_path, ts_path = str(tmp_path / "p.onnx"), str(tmp_path / "p.ts")
        to_onnx(DeployedPolicy(model).eval(), onnx_path)
        to_torchscript(DeployedPolicy(model).eval(), ts_path)
    spec = env_spec(cfg.env)
    deployed = DeployedPolicy(model).eval()
    observations, starts = recorded(cfg, spec, STEPS)
    rng = np.random.default_rng(2)
    steps = []
    for obs in observations:
        noise = {}
        if spec.action_heads:
            noise["uniform"] = rng.random((1, sum(spec.action_heads)), dtype=np.float32)
        if spec.continuous:
            noise["normal"] = rng.standard_normal((1, spec.continuous), dtype=np.float32)
        steps.append({**obs, **noise})
    assert sum(starts) >= 2 or case != "dict_lstm"  # (DictBandit's 8-step episodes: the state is reset in between)
    worst = compare(deployed, steps, onnx_path, ts_path, starts)
    print(case, json.dumps(worst))
    for runtime, diffs in worst.items():
        assert max(diffs.values()) <= TOLERANCE, (runtime, diffs)
    # the graph's sampled action is the trainer's: the policy worker's sample() from the same uniforms
    first = steps[0]
    names = [i.name for i in deployed.inputs]
    with torch.no_grad():
        action = deployed(*(torch.from_numpy(first[n]) if n != "state" else torch.zeros(1, model.state_size)
                            for n in names))[0]
        if spec.keys:  # packed by the trainer's own Packer, not the graph's
            image, vec = Packer(spec.keys)({k.name: first[k.name][0] for k in spec.keys})
            obs, meas = torch.from_numpy(image)[None], torch.from_numpy(vec)[None]
        else:
            obs = torch.from_numpy(first["obs"])
            meas = torch.from_numpy(first["meas"]) if spec.meas_size else torch.zeros(1, 0)
        params, _, _ = model.step(obs, meas, torch.zeros(1, model.state_size))
        u = [torch.from_numpy(first["uniform"])] if spec.action_heads else []
        if spec.continuous:  # the sampler's uniforms whose inverse normal CDF is the graph's normal draw
            u.append(torch.special.ndtr(torch.from_numpy(first["normal"])))
        theirs = model.heads.sample(params, torch.cat(u, -1))
    assert torch.allclose(action, theirs, atol=1e-4), (action, theirs)


def in_hub_cache(folder: str, cache: str, repo_id: str) -> None:
    """`folder` as the Hugging Face cache holds a downloaded repository (blobs by hash, a snapshot of
    links, refs/main), its directory named by the library's own repo_folder_name."""
    from huggingface_hub.file_download import repo_folder_name
    repo = os.path.join(cache, repo_folder_name(repo_id=repo_id, repo_type="model"))
    commit = "0" * 39 + "1"
    snapshot = os.path.join(repo, "snapshots", commit)
    for d in (snapshot, os.path.join(repo, "blobs"), os.path.join(repo, "refs")):
        os.makedirs(d, exist_ok=True)
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        blob = os.path.join(repo, "blobs", hashlib.sha256(data).hexdigest())
        with open(blob, "wb") as f:
            f.write(data)
        os.symlink(os.path.relpath(blob, snapshot), os.path.join(snapshot, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)


def enjoy_json(*argv, env=None):
    """launch.enjoy's figures, from the command line."""
    proc = run_module("launch.enjoy", *argv, timeout=180, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_export_plays_as_its_checkpoint_from_its_folder_the_hub_cache_and_onnx_runtime_without_torch(doom, tmp_path):
    cfg, model, folder = doom
    assert sorted(os.listdir(folder)) == ["README.md", "config.yaml", "model.safetensors", "policy.json",
                                          "policy.onnx", "policy.ts"]
    described = json.load(open(os.path.join(folder, "policy.json")))
    assert [i["name"] for i in described["inputs"]] == ["obs", "meas", "state", "uniform"]  # meas: game variables
    assert max(described["parity"]["onnx"].values()) <= TOLERANCE
    card = open(os.path.join(folder, "README.md")).read()
    assert "library_name: distrl" in card and "7,168 env frames" in card and "| `doom_basic`" in card
    greedy = ["enjoy.episodes=2", "enjoy.greedy=true"]
    from_run = api.enjoy(cfg.run_dir, *greedy)  # the Python API, in this process
    from_folder = api.enjoy(folder, *greedy)
    assert from_folder["policy"].endswith("model.safetensors") and from_folder["policy_version"] == 7
    same = ("reward_mean", "length_mean")
    assert [from_folder[k] for k in same] == [from_run[k] for k in same]
    # from the Hugging Face cache, offline (no network reaches the Hub here)
    cache = str(tmp_path / "hf")
    in_hub_cache(folder, cache, "someone/doom_basic")
    offline = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache)
    from_hub = enjoy_json("run_dir=hf://someone/doom_basic", *greedy, env=offline)
    assert [from_hub[k] for k in same] == [from_run[k] for k in same]
    assert not os.path.exists(os.path.join(cache, "models--someone--doom_basic", "snapshots", "0" * 39 + "1",
                                           ".workers"))
    missing = run_module("launch.enjoy", "run_dir=hf://someone/other", check=False, env=offline)
    assert missing.returncode == 2 and "cannot fetch the repository someone/other" in one_error_line(missing)
    # ONNX Runtime and the engine alone: the same greedy episodes, torch never imported
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "play_onnx.py"), folder, "--episodes", "2",
                           "--greedy"], cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    played = json.loads(proc.stdout.strip().splitlines()[-1])
    assert played["torch_imported"] is False and played["episodes"] == 2
    assert [played[k] for k in same] == [from_run[k] for k in same]


def test_launch_export_writes_the_folder_from_a_run_and_refuses_in_one_line(doom, tmp_path):
    cfg, _, _ = doom
    out = str(tmp_path / "ts_only")
    proc = run_module("launch.export", f"run_dir={cfg.run_dir}", "format=torchscript", f"out={out}", timeout=180)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["files"] == ["README.md", "config.yaml", "model.safetensors", "policy.json", "policy.ts"]
    assert result["policy_version"] == 7
    bad = run_module("launch.export", f"run_dir={cfg.run_dir}", "format=tflite", check=False)
    assert bad.returncode == 2 and "format=tflite: one of both, onnx, torchscript" in one_error_line(bad)
    empty = tmp_path / "no_checkpoint"
    empty.mkdir()
    (empty / "config.yaml").write_text(open(os.path.join(cfg.run_dir, "config.yaml")).read())
    for run_dir, argv, says in [  # the Python API raises the command line's line
        (empty, [], "no checkpoint in"),
        (cfg.run_dir, ["checkpoint=best"], "checkpoint=best: no file"),
        (tmp_path, [], "is not a run directory"),
    ]:
        with pytest.raises(ConfigError, match=says):
            api.export(str(run_dir), *argv)


def test_an_encoder_that_does_not_trace_is_refused_naming_its_line():
    cfg = compose("env=gym", "env.id=tests.envs:DictBandit-v0", "env.drop_keys=[mission]",
                  "model.encoder=tests.models:DataDependent")
    deployed = DeployedPolicy(ActorCritic(env_spec(cfg.env), cfg.model).eval())
    for export in (to_torchscript, to_onnx):
        with pytest.raises(ExportError) as err:
            export(deployed, os.devnull)
        assert "tests/models.py:" in str(err.value) and "\n" not in str(err.value), str(err.value)
