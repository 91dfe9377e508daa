"""One run state on every rank (nodes.run.run_state, nodes.run.membership), a signal during start-up
(nodes.run.signals votes), the checkpoint written off the lockstep (nodes.record.run_record)."""
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch
import yaml
from helpers import ROOT, compose, free_port, summary, train

from nodes.node import Node
from nodes.record import checkpoint as ckpt
from nodes.record.run_record import RunRecord
from nodes.run.peers import Solo

TWO_GYM = ["nodes=2", "env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
           "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
           "sampler.batch_size=128", "train.status_every_s=1", "sync.check_every=5", "sync.timeout_s=20",
           "sync.elastic=false"]


def set_frames(run_dir, frames):
    path = os.path.join(run_dir, "config.yaml")
    cfg = yaml.safe_load(open(path))
    cfg["train"]["max_env_frames"] = frames
    yaml.safe_dump(cfg, open(path, "w"))


def test_two_ranks_resuming_from_different_checkpoints_agree(tmp_path):
    """A fixed world whose ranks read different checkpoints (on a shared filesystem a rank may list the
    directory while rank 0 writes the next one): every rank takes rank 0's whole run state (versions,
    frames, iterations, normalisers), so they stay in lockstep and stop after the same iteration.
    Before, parameters and optimizer came from rank 0 but frames from each rank's own file: the rank
    that read the newer one stopped first and the other hung until the timeout."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train(a, *TWO_GYM, "train.max_env_frames=2048", timeout=300)
    shutil.copytree(a, b)
    train(b, *TWO_GYM, "train.max_env_frames=6144", timeout=300)
    va, vb = (ckpt.load(ckpt.latest(d))["policy_version"] for d in (a, b))
    assert vb > va
    for d in (a, b):
        set_frames(d, 10240)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "launch.node", d], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port)))
             for r, d in enumerate((a, b))]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    s = summary(a)  # rank 0's run directory
    assert s["outcome"] == "finished" and s["param_checksums"][0] == s["param_checksums"][1], s
    ranks = open(os.path.join(b, "train_rank1.log")).read()
    assert f"policy version {vb}" in ranks  # rank 1 did read the newer checkpoint ...
    ends = ranks.split("run finished: ")[-1]
    assert f'"policy_version": {s["policy_version"]},' in ends  # ... and still ended where rank 0 did
    # rank 0's state is the run's: its frames went on from its own checkpoint
    assert s["env_frames"] >= 10240 and s["resumed_from"].startswith(a)


class TwoRankRecorder(Solo):
    """A rank of a two-rank world that records its collective calls: ranks must make the same ones,
    in the same order, or the other rank waits in a collective forever."""

    world_size = 2

    def __init__(self):
        self.calls = []

    def share(self, progress, state):
        self.calls.append("share")

    def reduce_gradients(self, model, num_samples, vote=0, sums=None, member=0):
        self.calls.append(f"reduce(vote={vote})")
        return num_samples * 2, vote

    def gather_stats(self, values):
        self.calls.append("gather")
        return [list(values), list(values)]

    def check_agreement(self, model, version, extra=b""):
        self.calls.append("check")
        return super().check_agreement(model, version, extra) * 2


def test_a_signal_during_start_up_is_a_vote_cast_in_the_first_all_reduce(tmp_path, monkeypatch):
    """SIGTERM to one rank while its workers start: it does not stop alone (raising before the loop
    and then calling the summary's checksum collective that the other ranks are not in); it votes
    in the first gradient all-reduce, so every rank stops after that iteration."""
    from nodes.sampling import processes

    real_start = processes.WorkerPool.start

    def start_then_signal(pool, phase, *args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)  # while the workers start (the handler only records it)
        return real_start(pool, phase, *args, **kw)

    monkeypatch.setattr(processes.WorkerPool, "start", start_then_signal)
    cfg = compose(*TWO_GYM[1:], "train.max_env_frames=0", run_dir=str(tmp_path / "run"))
    peers = TwoRankRecorder()
    node = Node(cfg, peers, is_writer=True)
    with pytest.raises(Exception, match="SIGTERM") as err:
        node.run()
    assert type(err.value).__name__ == "Stopped"
    # the same calls a rank without the signal makes when another rank votes to stop
    assert peers.calls == ["share", "reduce(vote=15)", "gather", "check", "check"], peers.calls
    assert summary(cfg.run_dir)["outcome"] == "stopped by SIGTERM"


def test_a_rank_without_a_signal_stops_by_the_signal_the_world_voted(tmp_path):
    """Slurm signals a step's tasks some ms apart: the other rank voted on SIGUSR2 in the first
    all-reduce, this one got no signal (yet). It stops as the other does, by SIGUSR2 (the exit code
    and summary a Slurm rank 0 requeues on), not as a run that finished."""
    class OtherVotedUsr2(TwoRankRecorder):
        def reduce_gradients(self, model, num_samples, vote=0, sums=None, member=0):
            super().reduce_gradients(model, num_samples, vote, sums, member)
            return num_samples * 2, signal.SIGUSR2

    cfg = compose(*TWO_GYM[1:], run_dir=str(tmp_path / "run"))
    peers = OtherVotedUsr2()
    with pytest.raises(Exception, match="SIGUSR2") as err:
        Node(cfg, peers, is_writer=True).run()
    assert type(err.value).__name__ == "Stopped" and err.value.signum == signal.SIGUSR2
    assert peers.calls[:2] == ["share", "reduce(vote=0)"], peers.calls  # it voted nothing itself
    assert summary(cfg.run_dir)["outcome"] == "stopped by SIGUSR2"


def test_a_checkpoint_is_written_off_the_loop_from_a_copy(tmp_path, monkeypatch):
    """The loop hands the writer a CPU copy and goes on: the write (torch.save + fsync, slow on a
    shared filesystem) runs in a thread, and what it writes is the state when it was taken, not what
    the next steps made of it; the final checkpoint waits for the one being written."""
    release, entered = threading.Event(), threading.Event()
    real_save = ckpt.save

    def slow_save(run_dir, state, keep):
        entered.set()
        assert release.wait(30)
        return real_save(run_dir, state, keep)

    monkeypatch.setattr(ckpt, "save", slow_save)
    cfg = compose("env=gym", run_dir=str(tmp_path))
    record = RunRecord(cfg, is_writer=True)
    weights = torch.zeros(3)
    record.checkpoint({"policy_version": 1, "w": weights})
    assert entered.wait(10) and ckpt.latest(str(tmp_path)) is None  # returned before the write
    weights += 5  # the next step changes the live tensors
    release.set()
    record.checkpoint({"policy_version": 2, "w": weights}, wait=True)  # waits for version 1 first
    assert [ckpt.load(p)["w"].tolist() for p in ckpt.list_checkpoints(str(tmp_path))] == [[0.0] * 3, [5.0] * 3]
    record.close()
