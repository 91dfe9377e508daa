"""Shared helpers: run the real entry points as subprocesses, the way a user does."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A small, fast layout for CartPole runs: tests exercise the real processes and queues.
FAST_GYM = [
    "env=gym", "env.id=CartPole-v1", "model.fc_size=64", "model.hidden_size=64",
    "sampler.num_workers=2", "sampler.envs_per_worker=4", "sampler.rollout=16",
    "sampler.batch_size=128", "train.status_every_s=1", "algo.lr=0.001",
]


def run_module(module, *overrides, timeout=300, check=True):
    proc = subprocess.run([sys.executable, "-m", module, *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                             f"stderr:\n{proc.stderr[-3000:]}")
    return proc


def train(run_dir, *overrides, **kw):
    return run_module("launch.train", f"hydra.run.dir={run_dir}", *overrides, **kw)


def start_train(run_dir, *overrides):
    """launch.train in the background, in its own session, output on a pipe."""
    return subprocess.Popen([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", *overrides],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def read_until(proc, pattern, timeout):
    """Read proc's output until a line matches the regex; returns (match, lines read)."""
    deadline, seen = time.time() + timeout, []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m, seen
    raise AssertionError(f"'{pattern}' not seen in {timeout} s:\n{''.join(seen)[-3000:]}")


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")
