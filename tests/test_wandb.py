"""logger=[tensorboard,wandb]: the writer rank logs to Weights & Biases what TensorBoard gets, the
resolved config and summary.json, grouped by sweep; checked in W&B's offline mode (no network here)
by reading the run's own record file back with W&B's protobuf definitions. A missing package, a bad
mode or an unknown logger is refused in one line before anything starts."""
import glob
import json
import os
import struct
import subprocess

import pytest
from helpers import missing_dependency, one_error_line, refusal, run_module, summary

try:
    from wandb.proto import wandb_internal_pb2 as pb
except ImportError:
    pb = None

TINY = ["env=gym", "model.fc_size=16", "model.hidden_size=16", "sampler.num_workers=1", "sampler.envs_per_worker=2",
        "sampler.batch_size=32", "sampler.pin_workers=false", "train.learner_threads=1",
        "logger=[tensorboard,wandb]", "wandb.mode=offline"]
BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) records


def records(path: str):
    """Each protobuf Record of an offline run's .wandb file, in order."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if length == 0 and kind == 0:  # a block's zero padding
            pos += left
            continue
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last part of one
            record = pb.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def key(item) -> str:
    """An item's key: W&B stores a key with '/' as its parts (nested_key)."""
    return item.key or "/".join(item.nested_key)


def offline_run(run_dir: str, which: int = -1) -> dict:
    """One offline W&B run of run_dir (by start time): its run record, config, history rows and summary."""
    files = sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")))
    assert files, f"no offline W&B run under {run_dir}/wandb"
    out = {"run": None, "history": [], "summary": {}}
    for r in records(files[which]):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["run"] = r.run
            out["config"] = {i.key: json.loads(i.value_json) for i in r.run.config.update}
        elif kind == "history":
            out["history"].append({key(i): json.loads(i.value_json) for i in r.history.item})
        elif kind == "summary":
            out["summary"].update({key(i): json.loads(i.value_json) for i in r.summary.update})
    return out


def wandb_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "wandb-core"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_a_sweep_logs_each_run_to_wandb_grouped_by_the_sweep_and_a_relaunch_resumes_it(tmp_path):
    if pb is None:
        missing_dependency("wandb is not installed (pip install -e .[wandb]; setup.sh installs it)")
    sweep = str(tmp_path / "sweep")
    run_module("launch.train", "-m", f"hydra.sweep.dir={sweep}", *TINY, "train.max_env_frames=640", "seed=0,1",
               timeout=300)
    for job in (0, 1):
        run_dir = os.path.join(sweep, str(job))
        got = offline_run(run_dir)
        run = got["run"]
        assert run.project == "distrl" and run.run_group == "sweep" and run.display_name == f"sweep/{job}"
        # the resolved config, as config.yaml has it
        assert got["config"]["seed"] == job and got["config"]["env"]["name"] == "gym"
        assert got["config"]["wandb"]["group"] == "sweep" and got["config"]["run_dir"] == run_dir
        # TensorBoard's scalars, one row per step, env frames as the x axis
        rows = got["history"]
        frames = [row["env_frames"] for row in rows]
        assert frames == sorted(frames) and frames[-1] == summary(run_dir)["env_frames"]
        assert all("train/loss" in row and "perf/fps" in row for row in rows)
        last = [row for row in rows if "episode/reward" in row][-1]
        assert last["episode/true_objective"] == pytest.approx(summary(run_dir)["mean_episode_true_objective"])
        # the same reward curve as the run's TensorBoard file, point for point
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(os.path.join(run_dir, "tb"), size_guidance={"scalars": 0})
        acc.Reload()
        tb = [(e.step, e.value) for e in acc.Scalars("episode/reward")]
        wb = [(row["env_frames"], row["episode/reward"]) for row in rows if "episode/reward" in row]
        assert len(tb) == len(wb) > 3 and [s for s, _ in tb] == [s for s, _ in wb]
        assert [v for _, v in tb] == pytest.approx([v for _, v in wb], rel=1e-6)
        # summary.json's figures as the run's summary
        assert got["summary"]["mean_episode_reward"] == summary(run_dir)["mean_episode_reward"]
        assert got["summary"]["outcome"] == "finished"
    ids = {open(os.path.join(sweep, str(j), "wandb", "run_id")).read().strip() for j in (0, 1)}
    assert len(ids) == 2

    # a relaunch of run 0 with more frames continues its W&B run (the same id) from its frames
    run_dir = os.path.join(sweep, "0")
    before = summary(run_dir)["env_frames"]
    run_module("launch.train", f"hydra.run.dir={run_dir}", *TINY, "train.max_env_frames=1280", "seed=0", timeout=300)
    resumed = offline_run(run_dir, -1)
    assert resumed["run"].run_id == offline_run(run_dir, 0)["run"].run_id == open(
        os.path.join(run_dir, "wandb", "run_id")).read().strip()
    assert resumed["history"][0]["env_frames"] > before and resumed["summary"]["env_frames"] >= 1280
    assert not wandb_processes(), "W&B's service outlived the run"


@pytest.mark.parametrize("overrides, message", [
    (["logger=[tensorboard,wandb]", "wandb.mode=sometimes"], "wandb.mode must be one of online, offline, disabled"),
    (["logger=[tensorbored]"], "logger: each must be one of tensorboard, wandb, got ['tensorbored']"),
    (["logger=[wandb,wandb]"], "logger: each at most once"),
])
def test_bad_logger_settings_are_one_line(tmp_path, overrides, message):
    assert message in refusal(f"hydra.run.dir={tmp_path}/run", *overrides)
    assert not os.path.exists(tmp_path / "run")


def test_wandb_that_does_not_import_is_one_line(tmp_path):
    """A wandb that cannot be imported (here: one that raises on import, first on the path)."""
    fake = tmp_path / "fake" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no wandb here')\n")
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", "logger=[tensorboard,wandb]", check=False,
                      timeout=120, env=env)
    assert proc.returncode == 2
    assert one_error_line(proc) == ("error: logger=[...,wandb] needs the wandb package, which does not import here "
                                    "(no wandb here): pip install wandb")
