"""sync.elastic: real node processes on this machine, real gloo groups. A node is SIGKILLed or frozen
(SIGSTOP); the others re-form their world and train on with identical parameters, or stop below
sync.min_nodes (nodes.run.membership, sync.dist_peers `regroup`/`share`, sync.rendezvous). Nodes joining:
tests/test_chaos.py and tests/test_slurm.py."""
import contextlib
import os
import re
import signal
import subprocess
import threading
import time

import pytest
from helpers import ROOT, compose, free_port, start_train, summary, train, world_sizes

from launch.process.resolved import write_resolved
from launch.spawn.local import node_command
from nodes.record import checkpoint as ckpt
from sync.launches import new_launch
from sync.store_keeper import running

THREE_GYM = ["nodes=3", "env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
             "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
             "sampler.batch_size=128", "train.status_every_s=1", "sync.check_every=5", "sync.timeout_s=30"]


class Found:
    """A match and the index of its line in the output."""

    def __init__(self, match, line):
        self.match, self.line = match, line

    def group(self, *args):
        return self.match.group(*args)


class Output:
    """A background run's output, drained by a thread (a full pipe would stall the nodes' logging)."""

    def __init__(self, proc):
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, pattern, timeout, after=None):
        """The first match of `pattern` in a line (after the line of match `after`, if given)."""
        first = after.line + 1 if after is not None else 0
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, line in enumerate(list(self.lines)[first:], first):
                m = re.search(pattern, line)
                if m:
                    return Found(m, i)
            if self.proc.poll() is not None and not self.thread.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"'{pattern}' not seen in {timeout} s:\n{''.join(self.lines)[-3000:]}")

    def text(self):
        self.thread.join(10)
        return "".join(self.lines)


def start(run_dir, *overrides):
    proc = start_train(run_dir, *THREE_GYM, *overrides)
    out = Output(proc)
    m = out.wait_for(r"started \d nodes on .* \(pids ([\d ]+)\)", 60)
    pids = [int(p) for p in m.group(1).split()]
    out.wait_for(r"frames [\d,]+ \| fps", 120)  # the world formed and trains
    return proc, out, pids


def no_leftovers(run_dir):
    time.sleep(2)
    left = subprocess.run(["pgrep", "-f", f"launch.node {run_dir}"], capture_output=True, text=True).stdout
    assert not left.strip() and not running(run_dir), f"processes left behind: {left} {running(run_dir)}"


def test_killed_nodes_are_dropped_until_below_min_nodes_the_run_stops_and_a_relaunch_resumes(run_dir):
    """SIGKILL node 1 of 3 (sync.min_nodes=2): nodes 0 and 2 go on within seconds as a world of 2 and
    train; then SIGKILL node 2: one node is left, below sync.min_nodes, so it stops with a checkpoint
    (exit 75) and a relaunch on two nodes resumes. A node joining is the chaos soak's
    (tests/test_chaos.py), a requeued node rejoining the Slurm array test's (tests/test_slurm.py)."""
    proc, out, pids = start(run_dir, "sync.min_nodes=2", "train.max_env_frames=0")
    os.kill(pids[1], signal.SIGKILL)
    killed = time.time()
    changed = out.wait_for(r"world changed: 3 -> 2 nodes \(left \[1\]", 60)
    out.wait_for(r"frames [\d,]+ \| fps", 60, after=changed)  # the world of 2 trains
    os.kill(pids[2], signal.SIGKILL)
    assert proc.wait(120) == 75, out.text()[-3000:]
    text = out.text()
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert errors == ["error: 1 node(s) left, below sync.min_nodes=2 (lost node 1, 2): checkpoint written, "
                      "relaunch to resume"], text[-3000:]
    s = summary(run_dir)
    assert s["outcome"] == "stopped: below sync.min_nodes" and s["nodes"] == 1
    changes = s["membership"]
    assert [c["world_size"] for c in changes] == [3, 2, 1], changes
    assert changes[1]["left"] == [1] and changes[1]["nodes"] == [0, 2]
    assert changes[2]["left"] == [2] and changes[2]["nodes"] == [0]
    assert changes[1]["next_iteration"] - killed < 15, "the survivors took too long to train again"
    assert changes[2]["env_frames"] > changes[1]["env_frames"] > 0  # the world of 2 trained in between
    assert world_sizes(run_dir)[:2] == [3, 2]
    saved = ckpt.load(ckpt.latest(run_dir))
    assert saved["policy_version"] == s["policy_version"] > 0
    no_leftovers(run_dir)
    train(run_dir, *THREE_GYM, "nodes=2", f"train.max_env_frames={saved['env_frames'] + 4096}", timeout=300)
    s = summary(run_dir)
    assert s["resumed_from"] is not None and s["outcome"] == "finished" and s["nodes"] == 2
    assert s["policy_version"] > saved["policy_version"] and len(set(s["param_checksums"])) == 1


# rank 0 killed (the generation's store host and the writer: the writer moves to a survivor) is the
# chaos soak's first fault, on emulated hosts: tests/test_chaos.py


def _shm():
    """What a node can leave in /dev/shm: multiprocessing's named semaphores, VizDoom's segments."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(("sem.mp-", "ViZDoom"))}


def test_a_frozen_node_the_world_dropped_is_killed_and_the_run_finishes_on_a_joiner(run_dir):
    """Node 1 of 3 SIGKILLed, a node joins (launch.node), node 2 SIGSTOPped (dropped by its heartbeat),
    node 0 (the store's host, the writer) SIGKILLed: the joiner trains on alone. The launcher, whose
    ranks are all gone or frozen, ends the frozen one once its grace is over: the world dropped it,
    so it is killed, not woken (SIGTERM + SIGCONT) into the world, where its SIGTERM became a stop
    vote that ended the healthy run ("stopped by SIGTERM") short of its target. The launcher then
    waits for the run, which the joiner finishes at its target: exit 0 for both."""
    # SlowBandit at 5 ms a step: at most 200 frames/s a node whatever the machine. Node 0 is killed at
    # ~8k frames; the joiner alone then trains at most ~9k in the launcher's 45 s, so the run is short
    # of its target when node 2 is ended (asserted), and ends ~15 s after
    target, kill_at = 20_000, 8_000
    before = _shm()
    overrides = [o for o in THREE_GYM if not o.startswith(("env.id=", "sync.timeout_s="))]
    proc = start_train(run_dir, *overrides, "env.id=tests.envs:SlowBandit-v0", "+env.kwargs.delay_s=0.005",
                       "sync.timeout_s=15", f"train.max_env_frames={target}")
    out = Output(proc)
    pids = [int(p) for p in out.wait_for(r"started \d nodes on .* \(pids ([\d ]+)\)", 60).group(1).split()]
    out.wait_for(r"frames [\d,]+ \| fps", 120)
    joiner = None
    try:
        os.kill(pids[1], signal.SIGKILL)
        seen = out.wait_for(r"world changed: 3 -> 2 nodes \(left \[1\]", 60)
        cmd, env = node_command(run_dir, None)
        joiner = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        joined = Output(joiner)
        seen = out.wait_for(r"world changed: 2 -> 3 nodes \(left none, joined \[3\]", 120, after=seen)
        frames = 0
        while frames < kill_at:  # the world of 3 trains to kill_at: node 0's end does not depend on the machine
            seen = out.wait_for(r"frames ([\d,]+) \| fps", 60, after=seen)
            frames = int(seen.group(1).replace(",", ""))
        os.kill(pids[2], signal.SIGSTOP)
        frozen = time.time()
        out.wait_for(r"world changed: 3 -> 2 nodes \(left \[2\]", 60, after=seen)
        took = time.time() - frozen
        os.kill(pids[0], signal.SIGKILL)
        joined.wait_for(r"world changed: 2 -> 1 nodes \(left \[0\]", 60)
        out.wait_for(r"node rank 2 .* the world dropped it .*: killing it", 120)
        assert not os.path.exists(os.path.join(run_dir, "summary.json")), "the run ended before node 2 was ended"
        assert joiner.wait(300) == 0, joined.text()[-3000:]
        assert proc.wait(60) == 0, out.text()[-3000:]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if joiner is not None:
            joiner.kill()
        proc.kill()
    assert took < 20, f"the frozen node was dropped after {took:.1f} s"
    text = out.text() + joined.text()
    assert "another rank's vote" not in text and "received SIGTERM" not in text, text[-3000:]
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["env_frames"] >= target and s["node"] == 3, s
    # the joiner's record (it wrote the summary): from the generation it joined to the end
    assert [(c["world_size"], c["left"]) for c in s["membership"]] == [(3, []), (2, [2]), (1, [0])], s["membership"]
    no_leftovers(run_dir)
    assert not _shm() - before, f"/dev/shm entries left: {_shm() - before}"


def test_a_node_whose_clocks_run_ahead_is_not_named_lost_and_the_dead_one_is(tmp_path):
    """Hosts' clocks are never compared: rank 2 runs in a time namespace whose monotonic and boot-time
    clocks are 15 s ahead of the others' (`unshare --time`: the kernel's own clocks, as another host
    has; the wall clock's skew is tests/test_liveness.py's). Rank 1 is SIGKILLed: both survivors name
    rank 1 alone, form a world of 2 and finish with the same parameters. (libfaketime, which the
    issue used, makes Python's timed waits in the faked process hang: threading.Event().wait(1.0)
    had not returned after 50 s with its monotonic clock faked, so that rank's heartbeat really stops.)"""
    if os.geteuid() != 0:
        pytest.skip("a time namespace needs root")
    run_dir = str(tmp_path / "run")
    write_resolved(compose(*THREE_GYM, "train.max_env_frames=30000", run_dir=run_dir))
    port, launch = free_port(), new_launch()
    procs = []
    for rank in range(3):
        cmd, env = node_command(run_dir, (rank, 3, "127.0.0.1", port), launch=launch)
        if rank == 2:
            cmd = ["unshare", "--time", "--monotonic", "15", "--boottime", "15", *cmd]
        with open(f"{run_dir}/node{rank}.out", "w") as out:
            procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
    try:
        deadline = time.time() + 120
        while "| fps" not in open(f"{run_dir}/node0.out").read():
            assert time.time() < deadline and procs[0].poll() is None, open(f"{run_dir}/node0.out").read()[-3000:]
            time.sleep(0.2)
        time.sleep(1.0)
        procs[1].kill()
        codes = [p.wait(120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert codes == [0, -9, 0], codes
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["nodes"] == 2 and len(set(s["param_checksums"])) == 1
    assert [m["world_size"] for m in s["membership"]] == [3, 2], s["membership"]
    for log in ("train.log", "train_rank2.log"):
        lost = re.findall(r"lost rank ([\d, ]+) during", open(os.path.join(run_dir, log)).read())
        assert lost and set(lost) == {"1"}, (log, lost)
    no_leftovers(run_dir)
