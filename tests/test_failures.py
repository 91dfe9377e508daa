"""A crashing worker ends the run with its traceback, exit code 1, a summary and no leftovers."""
import glob
import os

from helpers import FAST_GYM, summary, train

from nodes.record import checkpoint as ckpt

SMALL = ["env=gym", "env.id=tests.envs:CrashAfter-v0", "model.fc_size=16", "model.hidden_size=16",
         "sampler.rollout=8", "sampler.batch_size=64", "sampler.envs_per_worker=2"]


def test_worker_crash_is_reported_with_its_traceback(run_dir):
    proc = train(run_dir, *SMALL, check=False, timeout=180)
    assert proc.returncode == 1, proc.stderr[-2000:]
    log = proc.stdout + proc.stderr
    assert "rollout worker" in log and "crashed" in log
    assert "RuntimeError: env exploded on purpose" in log
    s = summary(run_dir)
    assert s["outcome"] == "failed"
    if s["policy_version"] > 0:  # a final checkpoint is written when anything was learned
        assert ckpt.load(ckpt.latest(run_dir))["policy_version"] == s["policy_version"]
    assert not glob.glob(os.path.join(run_dir, ".workers", "*"))  # no worker directory left


def test_unexpected_error_is_one_line_on_the_console_and_its_traceback_in_the_log(run_dir):
    # the checkpoint directory is a file: the first periodic checkpoint fails in the node's main process
    os.makedirs(run_dir)
    open(os.path.join(run_dir, "checkpoints"), "w").close()
    proc = train(run_dir, *FAST_GYM, "train.max_env_frames=0", "train.checkpoint_every_s=0.5", check=False,
                 timeout=180)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    console = proc.stdout + proc.stderr
    assert "Traceback" not in console, console[-3000:]
    errors = [ln for ln in console.splitlines() if "[ERROR]" in ln]
    assert len(errors) == 1 and "FileExistsError" in errors[0] and "traceback in the log file" in errors[0], errors
    log = open(os.path.join(run_dir, "train.log")).read()
    assert "Traceback (most recent call last)" in log and "FileExistsError" in log and "run_record.py" in log
    assert summary(run_dir)["outcome"] == "failed"  # the summary is still written
