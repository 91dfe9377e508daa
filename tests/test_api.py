"""The Python API (launch/api.py) as a script uses it: the command line's log lines on stdout while
it trains, one line when a relaunch has nothing left to train, and bad input refused with one
exception whose message is the line the command line refuses it with."""
import os
import subprocess
import sys

import pytest
from helpers import ROOT, one_error_line, run_module

from launch import api
from nodes.errors import ConfigError

SMALL = ["env=gym", "env.id=CartPole-v1", "model.fc_size=16", "model.hidden_size=16", "sampler.num_workers=1",
         "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=64", "train.max_env_frames=1000"]
SCRIPT = """
import sys
from launch import api
from nodes.errors import ConfigError

if __name__ == "__main__":
    small = sys.argv[1:]
    api.train(small, "run")
    print("RELAUNCH", flush=True)
    print("SUMMARY", api.train(small, "run", quiet=True)["env_frames"], flush=True)
    try:  # refused where the rank starts: num_workers=auto is resolved there
        api.train([*small, "sampler.num_workers=auto", "sampler.mode=sync", "algo.minibatches=4096"], "run")
    except ConfigError as exc:
        print("REFUSED", exc, flush=True)
"""


def script(tmp_path, text: str, *args: str, stdin: bool = False) -> subprocess.CompletedProcess:
    """`text` run as a user's script (python script.py ARGS, or python - with it on stdin)."""
    (tmp_path / "script.py").write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-" if stdin else "script.py", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                          input=text if stdin else None)


def test_a_script_sees_its_run_as_the_command_line_shows_it(tmp_path):
    """Status lines on stdout as launch.train prints them; quiet keeps the warnings: a relaunch with
    nothing left to train says so in one line and returns the summary; a run its node refuses
    raises the refusal's line, once."""
    proc = script(tmp_path, SCRIPT, *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, rest = proc.stdout.split("RELAUNCH\n")
    assert "][nodes][INFO] - training: 1 rollout workers x 4 envs" in first, proc.stdout[-3000:]
    assert "][nodes][INFO] - run finished: {" in first
    relaunch, refused = rest.split("SUMMARY 1024\n")
    lines = relaunch.splitlines()
    assert len(lines) == 1 and lines[0].endswith("][nodes][WARNING] - the run already reached "
                                                 "train.max_env_frames=1000: nothing left to train (raise it to "
                                                 "train on)"), relaunch
    last = refused.splitlines()[-1]
    assert last.startswith("REFUSED algo.minibatches must be between 1 and the trajectories a node learns on"), last
    assert "error: " not in proc.stderr, proc.stderr[-3000:]


BAD = [
    ["train.max_env_frame=1000"],  # an unknown key
    ["algo.lr=0"],  # a bad value
    ["sampler.envs_per_worker=2.5"],  # a fraction for an integer
    ["env=doom_basics"],  # an unknown env
    ["env=gym", "env.id=CartPol-v1"],  # an unknown env id
    ["env=doom_basic", "model.encoder=mlp"],  # an encoder the env's observation does not fit
]


@pytest.mark.parametrize("overrides", BAD, ids=[b[-1] for b in BAD])
def test_the_api_refuses_with_the_command_lines_line(overrides, tmp_path):
    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/cli", *overrides, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_error_line(proc)
    with pytest.raises(ConfigError) as refused:
        api.train(overrides, run_dir=str(tmp_path / "api"))
    assert str(refused.value) == line.removeprefix("error: ")
    assert not os.path.exists(tmp_path / "api") and not os.path.exists(tmp_path / "cli")


def test_an_example_refuses_bad_input_in_one_line(tmp_path):
    """examples/own_env.py takes the command line's overrides, and refuses as it does."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "own_env.py"), "sampler.envs_per_worker=2.5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_error_line(proc) == "error: bad value for sampler.envs_per_worker: 2.5 is not a whole number"


def test_a_function_of_a_script_read_from_stdin_is_refused_for_what_it_is(tmp_path):
    """python - (the script on stdin) has no file the workers could import: said so, not that its
    name is a bad module name."""
    text = ("import gymnasium as gym\nfrom launch import api\n\ndef make_env():\n    return gym.make('CartPole-v1')\n\n"
            "with api.command_line_refusals():\n    api.config('env=gym', env_make=make_env)\n")
    proc = script(tmp_path, text, stdin=True)
    assert one_error_line(proc) == ("error: env_make: make_env is defined in a script read from standard input "
                                    "(python -), which the workers cannot import: save the script as a .py file")
