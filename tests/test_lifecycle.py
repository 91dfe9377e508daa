"""Run lifecycle through the real entry point: summary, TensorBoard, resume, signals, SIGKILL."""
import glob
import os
import re
import signal
import subprocess
import time

import pytest
import torch
from helpers import FAST_GYM, compose, one_error_line, read_until, start_train, summary, train

from launch.process.allocator import tcmalloc_library
from nodes.janitor import host_tag
from nodes.record import checkpoint as ckpt
from nodes.run.signals import SAME_REQUEST_S, StopSignals

# what a launch records in its run directory: the resolved config, and Hydra's own record
RECORD = ["config.yaml", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"]


def test_cartpole_run_writes_summary_tensorboard_and_resumes(run_dir):
    linear = "algo.lr_schedule=linear"  # to 0 at max_env_frames, which the resume below moves
    train(run_dir, *FAST_GYM, linear, "train.max_env_frames=2048", timeout=240)
    first = summary(run_dir)
    # the entry point started again with tcmalloc where it is installed (launch/process/allocator.py)
    assert first["allocator"] == ("tcmalloc" if tcmalloc_library() else "system")
    assert first["outcome"] == "finished" and first["nodes"] == 1
    assert first["env_frames"] >= 2048 and first["episodes"] > 0
    assert first["policy_version"] == first["env_frames"] // 128  # one step per batch of 128 frames
    assert len(first["param_checksums"]) == 1 and len(first["param_checksums"][0]) == 64
    assert os.path.isfile(os.path.join(run_dir, "config.yaml"))
    assert os.path.isfile(os.path.join(run_dir, "train.log"))
    # on a CPU the learner's threads are the cores its rollout and policy workers leave, at least one
    cfg = compose(*FAST_GYM)
    free = len(os.sched_getaffinity(0)) - cfg.sampler.num_workers - cfg.sampler.num_policy_workers
    assert f"learner {max(1, free)} thread(s)" in open(os.path.join(run_dir, "train.log")).read()
    # TensorBoard reads the event file back
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(run_dir, "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"perf/fps", "episode/reward", "episode/true_objective", "episode/length"} <= set(tags)
    # CartPole scores 1 a step (frameskip 1) and has no objective of its own: the three agree
    assert first["mean_episode_true_objective"] == first["mean_episode_reward"] == first["mean_episode_length"]
    assert acc.Scalars("episode/length")[-1].value == acc.Scalars("episode/reward")[-1].value > 8
    assert len(acc.Scalars("train/loss")) == first["policy_version"]
    # the lr (FAST_GYM's 0.001) at each iteration: 1 - frames before it / 2048, 16 steps of 128
    lrs = [e.value for e in acc.Scalars("train/lr")]
    assert lrs == pytest.approx([0.001 * (1 - i / 16) for i in range(16)], rel=1e-6)
    # the checkpoint holds the optimizer state of every step taken
    state = ckpt.load(ckpt.latest(run_dir))
    assert state["env_frames"] == first["env_frames"]
    assert int(state["optimizer"]["state"][0]["step"]) == first["policy_version"]

    # same run directory again: resumes, continues the frame counter and the optimizer
    train(run_dir, *FAST_GYM, linear, "train.max_env_frames=4096", timeout=240)
    second = summary(run_dir)
    assert second["resumed_from"] and second["resumed_from"].endswith(f"checkpoint_{first['policy_version']:09d}.pt")
    assert second["env_frames"] >= 4096
    assert second["policy_version"] == second["env_frames"] // 128
    state = ckpt.load(ckpt.latest(run_dir))
    assert int(state["optimizer"]["state"][0]["step"]) == second["policy_version"]
    assert second["param_checksums"] != first["param_checksums"]
    assert "resumed from" in open(os.path.join(run_dir, "train.log")).read()
    acc.Reload()  # the resumed launch goes on from 2048 of 4096 frames: half the lr, down to 1/32
    resumed = [e.value for e in acc.Scalars("train/lr") if e.step > 2048]
    assert resumed == pytest.approx([0.001 * (1 - i / 32) for i in range(16, 32)], rel=1e-6)
    # the accepted relaunch's record is the run's: its config.yaml, Hydra's own in .hydra/
    assert "train.max_env_frames=4096" in open(os.path.join(run_dir, ".hydra", "overrides.yaml")).read()

    # a relaunch refused because the checkpoint does not fit the model (found by the node, after
    # the launch wrote its config): one line, and the run's config.yaml and .hydra/ as they were
    kept = {name: open(os.path.join(run_dir, name), "rb").read() for name in RECORD}
    other = [o.replace("model.hidden_size=64", "model.hidden_size=32") for o in FAST_GYM]
    proc = train(run_dir, *other, linear, "train.max_env_frames=6144", check=False, timeout=240)
    assert proc.returncode == 2 and "does not fit this model/config" in one_error_line(proc), proc.stderr[-3000:]
    assert "core.weight_ih [192, 64] -> [96, 64]" in proc.stderr  # what differs, named
    assert {name: open(os.path.join(run_dir, name), "rb").read() for name in RECORD} == kept
    assert sorted(os.listdir(os.path.join(run_dir, ".hydra"))) == sorted(os.path.basename(n) for n in RECORD[1:])
    assert not glob.glob(os.path.join(run_dir, ".hydra?*"))  # nothing of the refused launch left beside it


def test_foreign_checkpoint_in_run_dir_is_one_line_error(run_dir):
    os.makedirs(ckpt.checkpoint_dir(run_dir))
    torch.save({"model": {}}, os.path.join(ckpt.checkpoint_dir(run_dir), "checkpoint_000000005.pt"))
    proc = train(run_dir, *FAST_GYM, "train.max_env_frames=256", check=False, timeout=120)
    assert proc.returncode == 2
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "is not a distrl-checkpoint-v1 checkpoint" in err[0], proc.stderr


def test_sigterm_stops_cleanly_with_final_checkpoint(run_dir):
    proc = start_train(run_dir, *FAST_GYM, "train.max_env_frames=0")
    read_until(proc, "frames ", 120)  # a status line: training is under way
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "received SIGTERM" in out
    s = summary(run_dir)
    assert s["outcome"] == "stopped by SIGTERM" and s["env_frames"] > 0
    assert ckpt.load(ckpt.latest(run_dir))["env_frames"] == s["env_frames"]


def test_a_signal_delivered_twice_at_once_is_one_request_and_a_later_one_is_impatience():
    """A terminal's Ctrl-C reaches a node twice (its process group, and launch.spawn.local's forward):
    one request. The same signal again after SAME_REQUEST_S, or another signal, is a second Ctrl-C."""
    for second, wait in ((signal.SIGINT, SAME_REQUEST_S + 0.2), (signal.SIGTERM, 0.0)):
        with StopSignals(vote=True) as signals:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # Python runs the handlers between bytecodes: they have run
            assert signals.received == signal.SIGINT
            time.sleep(wait)
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), second)
                time.sleep(0.5)


def _descendants(pid):
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(c) for c in children] + [d for c in children for d in _descendants(int(c))]


def test_sigterm_to_every_process_of_the_run_stops_it_cleanly(run_dir):
    """Slurm signals every process of a job step (scancel, scontrol requeue, preemption): the main
    process decides to stop, while the fork server, the workers and the janitor hold the stop
    signals blocked and see the run out. A worker or a server that died of SIGTERM would fail it."""
    proc = start_train(run_dir, *FAST_GYM, "train.max_env_frames=0")
    read_until(proc, "frames ", 120)  # a status line: training is under way
    others = _descendants(proc.pid)
    assert len(others) >= 4  # the fork server, its two rollout workers and policy worker, the janitor
    # the children first: they hold the signal blocked, so none can end before its turn (sent to the
    # main process first, its stop could end a child between the listing and the child's signal)
    for pid in [*others, proc.pid]:
        os.kill(pid, signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    s = summary(run_dir)
    assert s["outcome"] == "stopped by SIGTERM" and s["env_frames"] > 0, out[-2000:]
    assert ckpt.load(ckpt.latest(run_dir))["env_frames"] == s["env_frames"]


def _vizdoom_pids():
    out = subprocess.run(["pgrep", "-f", "vizdoom -iwad"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _shm():
    return set(glob.glob("/dev/shm/*"))


def test_sigkill_leaves_no_vizdoom_process_and_no_shm_segment(run_dir):
    before_pids, before_shm = _vizdoom_pids(), _shm()
    proc = start_train(run_dir, "env=doom_basic", "sampler.num_workers=2", "sampler.envs_per_worker=4",
                  "train.status_every_s=1")
    read_until(proc, "frames ", 180)
    ours = _vizdoom_pids() - before_pids
    assert len(ours) == 8, "expected 8 VizDoom engines while training"
    assert _shm() - before_shm, "VizDoom engines should hold /dev/shm segments while running"
    workers = os.path.join(run_dir, ".workers")  # VizDoom's files in each worker's own directory
    named = [d for d in os.listdir(workers) if re.fullmatch(rf"rollout[01]_{re.escape(host_tag())}_pid\d+", d)]
    assert len(named) == 2 == len(os.listdir(workers)), os.listdir(workers)  # by name, host and pid
    assert all(os.path.isdir(os.path.join(workers, d, "_vizdoom")) for d in named)  # made at init
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)

    def trainer_processes():
        return subprocess.run(["pgrep", "-f", f"hydra.run.dir={run_dir}"], capture_output=True, text=True).stdout

    deadline = time.time() + 15  # the janitor sees the pipe close within 0.5 s, then kills and cleans
    while time.time() < deadline and (_vizdoom_pids() & ours or trainer_processes().strip() or _shm() - before_shm):
        time.sleep(0.2)
    assert not (_vizdoom_pids() & ours), "VizDoom engines outlived a SIGKILLed trainer"
    left = trainer_processes()
    assert not left.strip(), f"trainer processes left: {left}"
    assert not (_shm() - before_shm), f"/dev/shm segments left: {_shm() - before_shm}"
    assert not os.listdir(workers), "the janitor left the killed workers' directories"
