"""launch.import_sf on a checkpoint Sample Factory 2.1.1 wrote here (tests/data/sf_doom_basic, made by
its make_fixture.py with Sample Factory's own venv; no Sample Factory is needed to run these): our
model, imported, gives Sample Factory's own action logits, values and recurrent states on real
doom_basic frames; what does not map is refused in one line."""
import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest
import torch
from helpers import missing_dependency

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sf_doom_basic")
# fp32: the two normalisers' arithmetic differs in order only (launch.share.sf_checkpoint), which
# leaves ~4e-8 here; the fixture's net is barely trained, so a wrong normaliser epsilon (1e-5 in
# pixel units instead of 255^2 x 1e-5) moves its outputs by only ~3e-5, which this still catches
TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def _vizdoom():
    try:
        import vizdoom  # noqa: F401 - the env's spec and buttons come from its scenario files
    except ImportError:
        missing_dependency("vizdoom is not installed")


def import_sf(*argv) -> str:
    """launch.import_sf in this process; its one `error: ...` line when it refuses (exit code 2), else ""."""
    from launch.import_sf import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(list(argv))
        except SystemExit as exc:
            assert exc.code == 2, err.getvalue()
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
            return lines[0]
    return ""


def sf_copy(tmp_path, **config) -> str:
    """The fixture's experiment directory copied, its config.json's keys replaced by `config`."""
    sf_dir = str(tmp_path / "sf")
    shutil.copytree(FIXTURE, sf_dir)
    path = os.path.join(sf_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(config)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return sf_dir


def test_the_imported_model_gives_sample_factorys_outputs(tmp_path):
    from launch.enjoy import load_policy
    from launch.process.resolved import read_resolved
    run_dir = str(tmp_path / "run")
    assert import_sf(f"sf_dir={FIXTURE}", f"run_dir={run_dir}") == ""
    cfg = read_resolved(run_dir)
    assert (cfg.env.name, cfg.env.width, cfg.env.height, cfg.env.render_hud) == ("doom_basic", 64, 36, True)
    (model,), _, state = load_policy(cfg)  # what launch.enjoy plays, through its own checks
    assert state["env_frames"] == 2816 and state["returns"]["count"] > 1
    sf = np.load(os.path.join(FIXTURE, "sf_outputs.npz"))
    steps, envs = sf["obs"].shape[:2]
    h = torch.zeros(envs, model.state_size)
    with torch.no_grad():
        for t in range(steps):
            params, value, h = model.step(torch.from_numpy(sf["obs"][t]), torch.zeros(envs, 0), h)
            assert np.abs(params.numpy() - sf["action_logits"][t]).max() <= TOLERANCE, t
            assert np.abs(value.numpy() - sf["values"][t]).max() <= TOLERANCE, t
            assert np.abs(h.numpy() - sf["rnn_states"][t]).max() <= TOLERANCE, t
    # the logits move from step to step by far more than the tolerance: the comparison can fail
    assert np.ptp(sf["action_logits"][:, 0, 0]) > 100 * TOLERANCE


def test_a_checkpoint_of_another_architecture_is_refused_in_one_line(tmp_path):
    sf_dir = sf_copy(tmp_path, rnn_size=32)  # config.json says 32, the checkpoint holds a GRU of 16
    line = import_sf(f"sf_dir={sf_dir}", f"run_dir={tmp_path / 'run'}")
    assert "tensor core.core.weight_ih_l0 is [48, 16]" in line and "[96, 16]" in line, line
    assert not os.path.exists(tmp_path / "run" / "config.yaml")  # nothing written


@pytest.mark.parametrize(("config", "argv", "says"), [
    ({"env": "doom_battle"}, (), "Sample Factory env 'doom_battle' has no counterpart here"),
    ({"decoder_mlp_layers": [64]}, (), "decoder_mlp_layers=[64] has no counterpart in our model"),
    ({}, ("checkpoint=/nonexistent.pth",), "checkpoint=/nonexistent.pth: no such file"),
    ({}, ("checkpoint=best",), "no best_*.pth"),
    ({}, ("env=doom_basicc",), "doom_basicc"),
    ({}, ("model.fc_size=32",), "unknown config key"),
])
def test_what_does_not_map_is_refused_in_one_line(tmp_path, config, argv, says):
    line = import_sf(f"sf_dir={sf_copy(tmp_path, **config)}", f"run_dir={tmp_path / 'run'}", *argv)
    assert says in line, line


def test_a_missing_experiment_is_refused_in_one_line(tmp_path):
    assert "no such directory" in import_sf(f"sf_dir={tmp_path / 'nope'}", f"run_dir={tmp_path / 'run'}")
    os.makedirs(tmp_path / "empty")
    assert "no config.json" in import_sf(f"sf_dir={tmp_path / 'empty'}", f"run_dir={tmp_path / 'run'}")


def test_sample_factorys_action_heads_are_put_in_the_order_of_ours():
    """defend_the_center: its heads are turn (none/left/right) then attack (none/attack), ours attack then
    turn (nodes.envs.doom.action_heads): each of our logits takes the one that presses the same buttons."""
    from helpers import compose

    from launch.share.sf_checkpoint import SF_ENVS, action_order
    env = compose("env=doom_defend_the_center").env
    assert action_order(env, SF_ENVS["doom_defend_the_center"].heads) == [3, 4, 0, 1, 2]
    basic = compose("env=doom_basic").env  # one head, none then each button alone: as it is
    assert action_order(basic, SF_ENVS["doom_basic"].heads) == [0, 1, 2, 3]


def test_pixels_only_scaled_by_sample_factory_are_scaled_alike():
    """normalize_input=false: it feeds (x - obs_subtract_mean) / obs_scale; our normaliser, filled by the
    import, gives the same."""
    from launch.share.sf_checkpoint import SF_EPS, _obs_norm
    from nodes.models.normalisers import RunningNorm
    sf_cfg = {"normalize_input": False, "obs_scale": 255.0, "obs_subtract_mean": 10.0}
    norm = RunningNorm((3, 4, 5), eps=255.0**2 * SF_EPS)
    norm.load_state_dict({k.split(".")[1]: v for k, v in _obs_norm({}, sf_cfg, (3, 4, 5), "x").items()})
    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    assert torch.allclose(norm(x), (x.float() - 10.0) / 255.0, atol=1e-6, rtol=0)


def test_env_resize_floor_takes_the_pixels_opencvs_nearest_resize_takes():
    """An imported agent sees the frames it was trained on: Sample Factory resizes with OpenCV's
    INTER_NEAREST (recorded in the fixture by OpenCV itself), which env.resize=floor reproduces
    pixel for pixel; our default (centre) takes another source pixel for most of them."""
    from helpers import compose

    from nodes.envs import make_env
    recorded = np.load(os.path.join(FIXTURE, "cv2_nearest_160x120_to_128x72.npz"))["index"]
    rows, cols = recorded // 160, recorded % 160
    frames = {}
    for resize in ("floor", "centre"):
        env = make_env(compose("env=doom_basic", f"env.resize={resize}").env, seed=0)
        try:
            pixels, _ = env.reset()  # (pixels, game variables)
            screen = env.game.get_state().screen_buffer  # [3, 120, 160], what the resize read
        finally:
            env.close()
        assert screen.shape == (3, 120, 160)
        frames[resize] = (pixels, screen)
    pixels, screen = frames["floor"]
    assert np.array_equal(pixels, screen[:, rows, cols])
    pixels, screen = frames["centre"]
    assert not np.array_equal(pixels, screen[:, rows, cols])


def test_a_checkpoint_as_sample_factory_writes_it_with_numpy_scalars_is_imported(tmp_path):
    """Sample Factory stores its best_performance as a numpy float64, which torch's weights-only
    loader refuses unless allowed (the fixture's copy had lost it)."""
    sf_dir = sf_copy(tmp_path)
    (path,) = [os.path.join(sf_dir, "checkpoint_p0", f) for f in os.listdir(os.path.join(sf_dir, "checkpoint_p0"))]
    state = torch.load(path, weights_only=True)
    state["best_performance"] = np.float64(0.82)
    torch.save(state, path)
    assert import_sf(f"sf_dir={sf_dir}", f"run_dir={tmp_path / 'ours'}") == ""
