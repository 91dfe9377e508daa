"""A crashing worker ends the run with its traceback, exit code 1, a summary and no leftovers."""
import os

from helpers import summary, train

from nodes import checkpoint as ckpt

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
    assert not os.listdir(os.path.join(run_dir, ".workers"))  # worker directories removed
