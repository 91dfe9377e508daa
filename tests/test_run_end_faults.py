"""The end of a run under faults: each fault x {1 node, 2 nodes}, run as a user runs the trainer
(`python -m launch.train`, its own session), the fault made real at its moment: a SIGKILLed
evaluator, a full filesystem (a small tmpfs), Ctrl-C from the terminal, a SIGKILLed writer, a
SIGTERM. Where no outside timing can hit the moment (a checkpoint's write, the final collective),
the node sends itself the signal at a fault point (nodes/faults.py: DISTRL_FAULT).

Each cell asserts that the run ends within a bounded time with the documented exit code and
outcome, a summary.json where the docs promise one, the newest complete checkpoint loadable, and
nothing left: no temp file, no process of the run's session, no new /dev/shm file, no .workers/
directory, no new /tmp/pymp-* directory (docs/run-directory.md#when-a-run-ends).
"""
import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, missing_dependency, read_until, summary

from nodes.record import checkpoint as ckpt

TINY = ["env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32", "sampler.num_workers=1",
        "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=64", "sync.timeout_s=20",
        "train.status_every_s=1", "train.max_env_frames=3000"]
# the first round starts at the last iteration and plays far longer than the test waits
FINAL_ROUND = ["eval.every_frames=3000", "eval.episodes=1000000"]
BOUND_S = 20  # from the fault to the launcher's exit


def start(run_dir, nodes, overrides, fault=None):
    env = dict(os.environ, DISTRL_FAULT=fault) if fault else None
    return subprocess.Popen([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", f"nodes={nodes}",
                             *TINY, *overrides], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=env)


def writer_pid(proc, nodes):
    """The pid of the node that writes: the launch itself with one node, rank 0's with several."""
    if nodes == 1:
        return proc.pid
    return int(read_until(proc, r"started 2 nodes on .* \(pids (\d+) (\d+)\)", 60)[0].group(1))


def wait_for(proc, condition, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"{what}: not within {timeout} s\n{proc.communicate()[0][-3000:]}")


def evaluators(sid):
    """The pids of the run's evaluators (the processes of its session that name themselves so)."""
    found = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(d)) == sid and open(f"/proc/{d}/comm").read().strip() == "evaluator":
                found.append(int(d))
        except OSError:
            continue
    return found


def in_final_round(proc, run_dir):
    """The evaluator's pid once the final checkpoint is written and the final round plays."""
    players = evaluators(proc.pid)
    return ckpt.latest(run_dir) and players and players[0]


def stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2] == "T"


def session_left(sid):
    """Processes of the run's session (every process of the run, the janitor's group included)."""
    left = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(d)) == sid:
                left.append(open(f"/proc/{d}/cmdline").read().replace("\0", " ")[:120])
        except OSError:
            continue
    return left


def finish(proc, run_dir, before, code, outcome):
    """The run ends within BOUND_S with `code`, and leaves what the docs promise and nothing else."""
    try:
        out = proc.communicate(timeout=BOUND_S)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"the run did not end within {BOUND_S} s of the fault:\n"
                             f"{proc.communicate()[0][-3000:]}") from None
    assert proc.returncode == code, out[-3000:]
    s = summary(run_dir) if outcome else None
    if outcome:
        assert s["outcome"] == outcome, s
    else:
        assert not os.path.exists(os.path.join(run_dir, "summary.json")), "a killed writer wrote a summary?"
    for path in ckpt.list_checkpoints(run_dir):  # the newest complete one loads: so do all the rest
        ckpt.load(path)
    def left():
        return (glob.glob(os.path.join(run_dir, "**", "*.tmp*"), recursive=True) + session_left(proc.pid)
                + glob.glob(os.path.join(run_dir, ".workers", "*")) + sorted(leftovers() - before))

    deadline = time.time() + 5  # after a kill, the janitor's sweep (its look, then the resource tracker's turn)
    while left() and time.time() < deadline:
        time.sleep(0.1)
    assert not left(), left()
    return out, s


def leftovers():
    return set(os.listdir("/dev/shm")) | set(glob.glob("/tmp/pymp-*"))


@pytest.mark.parametrize("nodes", [1, 2])
def test_evaluator_killed_during_the_final_round(run_dir, nodes):
    """The round is dropped with a warning; the run has finished (it waited sync.timeout_s for a
    dead evaluator, then hung with its workers alive)."""
    before = leftovers()
    proc = start(run_dir, nodes, FINAL_ROUND)
    evaluator = wait_for(proc, lambda: in_final_round(proc, run_dir), 90, "the final round")
    os.kill(evaluator, signal.SIGKILL)
    out, s = finish(proc, run_dir, before, 0, "finished")
    assert "the last evaluation round (at 3,0" in out and "was dropped: the evaluator exited unexpectedly" in out
    assert s["eval"]["rounds"] == 1 and s["eval"]["last"] is None
    assert ckpt.load(ckpt.latest(run_dir))["policy_version"] == s["policy_version"]


@pytest.mark.parametrize("nodes", [1, 2])
def test_final_checkpoint_on_a_full_filesystem(run_dir, nodes):
    """The writer's final write fails (ENOSPC): the run failed (exit 1), its summary says so, the
    last complete checkpoint before it loads and the partial file is gone (it was left, full size)."""
    if os.geteuid() != 0:
        missing_dependency("a small tmpfs needs root to mount")
    checkpoints = ckpt.checkpoint_dir(run_dir)
    os.makedirs(checkpoints)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", checkpoints], check=True)
    proc = None
    try:
        before = leftovers()
        proc = start(run_dir, nodes, ["train.max_env_frames=6000", "train.checkpoint_every_s=0.5"],
                     fault="final_checkpoint:SIGSTOP:0")
        writer = writer_pid(proc, nodes)
        wait_for(proc, lambda: stopped(writer), 90, "the writer at its final checkpoint")
        assert ckpt.list_checkpoints(run_dir), "no checkpoint during the run"
        # the filesystem, full
        with open(os.path.join(checkpoints, "filler"), "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 4096)
        os.kill(writer, signal.SIGCONT)
        out, _ = finish(proc, run_dir, before, 1, "failed")
        assert "No space left on device" in out, out[-2000:]
        if nodes == 2:  # the writer's failure is its own: the other rank finished after the final check
            assert "node rank 0 exited with code 1" in out and "node rank 1 exited" not in out, out[-2000:]
    finally:
        if proc is not None and proc.poll() is None:  # a failed assertion left the writer stopped
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["umount", "-l", checkpoints], check=False)


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_second_stop_signal_during_the_final_round(run_dir, nodes):
    """SIGTERM, then Ctrl-C at once (a second signal: nodes.run.signals raises KeyboardInterrupt in
    the wait), to every process of the run's group: the round is dropped and the run has finished
    (the first was ignored until the round's timeout, the second left the workers running and the
    process hung)."""
    before = leftovers()
    proc = start(run_dir, nodes, FINAL_ROUND)
    wait_for(proc, lambda: in_final_round(proc, run_dir), 90, "the final round")
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: every process of its group
    out, s = finish(proc, run_dir, before, 0, "finished")
    assert "was dropped" in out and s["eval"]["last"] is None, out[-2000:]


@pytest.mark.parametrize("nodes", [1, 2])
def test_writer_killed_during_the_final_checkpoint(run_dir, nodes):
    """SIGKILL between the temp file's fsync and its rename: no summary, exit 128 + 9, and the temp
    file removed by the node's janitor (it was left, full size)."""
    before = leftovers()
    proc = start(run_dir, nodes, [], fault="checkpoint_written:SIGKILL:0")
    out, _ = finish(proc, run_dir, before, -9 if nodes == 1 else 137, None)
    assert not ckpt.list_checkpoints(run_dir)
    if nodes == 2:
        assert "node rank 0 exited with code -9" in out, out[-2000:]


@pytest.mark.parametrize("nodes", [1, 2])
def test_sigterm_during_the_final_collective(run_dir, nodes):
    """A stop signal after the last iteration changes nothing: every rank finishes, agreeing."""
    before = leftovers()
    proc = start(run_dir, nodes, [], fault="final_collective:SIGTERM")
    out, s = finish(proc, run_dir, before, 0, "finished")
    assert re.search(r"received SIGTERM", out), out[-2000:]
    assert len(set(s["param_checksums"])) == 1 and len(s["param_checksums"]) == nodes
    assert ckpt.load(ckpt.latest(run_dir))["policy_version"] == s["policy_version"]
