"""Test helpers: configs composed from conf/ the way users get them, and the real entry points
run as subprocesses, the way a user runs them."""
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from launch.spawn.local import free_port  # noqa: F401 - one free_port, for the project and its tests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF_DIR = os.path.join(ROOT, "conf")


def missing_dependency(why: str) -> None:
    """A test whose dependency (Slurm, ALE, ...) is not installed: skipped, saying why; under CI
    (CI=true) failed with the same reason, since there setup.sh installed it and a failed install
    must not pass as a run of skips."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: setup.sh should have installed it)", pytrace=False)
    pytest.skip(why)


# A small, fast layout for CartPole runs: tests exercise the real processes and queues.
FAST_GYM = [
    "env=gym", "env.id=CartPole-v1", "model.fc_size=64", "model.hidden_size=64",
    "sampler.num_workers=2", "sampler.envs_per_worker=4", "sampler.rollout=16",
    "sampler.batch_size=128", "train.status_every_s=1", "algo.lr=0.001",
]


def compose(*overrides, run_dir=None):
    """The validated Config object `python -m launch.train <overrides>` would train with."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    obj = OmegaConf.to_object(cfg)
    obj.run_dir = run_dir
    return obj


def run_module(module, *overrides, timeout=300, check=True, env=None):
    proc = subprocess.run([sys.executable, "-m", module, *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)
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


def one_error_line(proc):
    """The single `error: ...` line a refused command prints (asserts there is exactly one line)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


def refusal(*argv):
    """The one `error: ...` line `python -m launch.train ARGV` refuses with (exit code 2), from the
    check the command runs before anything starts, called in this process: a subprocess per bad
    value costs ~0.8 s (tests/test_config_validation.py runs a few through the real command)."""
    import contextlib
    import io

    from launch.cli.app import check
    from launch.cli.overrides import check_command

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        check_command(list(argv), check)
    assert exit_.value.code == 2, err.getvalue()
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
    return lines[0]


def group_conf(group, name, **fields):
    """The `group` section (env, model, ...) that `group=name` selects, with fields replaced."""
    import dataclasses

    return dataclasses.replace(getattr(compose(f"{group}={name}"), group), **fields)


def world_sizes(run_dir):
    """The membership/world_size scalars of every TensorBoard file in the run (all writers')."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sizes = []
    for path in sorted(glob.glob(os.path.join(run_dir, "tb", "events.*"))):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        if "membership/world_size" in acc.Tags()["scalars"]:
            sizes += [(e.step, int(e.value)) for e in acc.Scalars("membership/world_size")]
    return [size for _, size in sorted(sizes)]
