"""Small pieces of the end of a run, each with a real process or file where it matters: the local
launcher's wait on ranks that cannot make progress, the fork server's preload of the main module,
two checkpoint writers pruning the same file, a step of the end that fails after the run failed (the
fault matrix: tests/test_run_end_faults.py)."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from helpers import compose, summary

from launch.spawn import local
from nodes.record import checkpoint as ckpt


def test_the_launcher_ends_ranks_that_all_stay_stopped():
    """An elastic launch whose other ranks are gone (one failed, the run went on elsewhere) and whose
    last rank is stopped (SIGSTOP: it acts on no signal): the wait ends after the grace, the stopped
    rank killed (it waited forever on it)."""
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    frozen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    os.kill(frozen.pid, signal.SIGSTOP)
    codes = {}
    waiter = threading.Thread(target=lambda: codes.update(local._wait([failed, frozen], 1.0, True)), daemon=True)
    t0 = time.time()
    waiter.start()
    waiter.join(30)
    try:
        assert not waiter.is_alive(), "the launcher still waits on a stopped rank"
        assert codes == {0: 1, 1: -signal.SIGTERM} and time.time() - t0 < 15, (codes, time.time() - t0)
    finally:
        frozen.kill()
        frozen.wait()


def test_a_rank_killed_by_a_signal_is_reported_as_a_shell_shows_it():
    assert local._exit_code([0, -9], elastic=False) == 137
    assert local._exit_code([0, -9], elastic=True, outcome=None) == 137  # the writer died: no summary
    assert local._exit_code([0, -9], elastic=True, outcome="finished") == 0
    assert local._exit_code([0, 1], elastic=True, outcome="failed") == 1


def test_the_fork_server_does_not_preload_a_packages_main_module():
    """`python -m pkg` runs pkg/__main__.py as __main__ with spec name `pkg.__main__`: multiprocessing
    never re-imports it (its code runs unguarded), and preloaded in the fork server an error there
    ended the server; every later worker start then failed with an unrelated message."""
    code = ("import sys, types; main = sys.modules['__main__']; "
            "main.__spec__ = types.SimpleNamespace(name=sys.argv[1]); "
            "from nodes.sampling.fork_server import preloadable_main; print(preloadable_main())")
    got = [subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout.strip()
           for name in ("launch.train", "mypkg.__main__")]
    assert got == ["['launch.train']", "[]"]


def test_two_writers_pruning_the_same_checkpoint_both_succeed(tmp_path):
    """An elastic handover: the old writer's last checkpoint and the new writer's first prune the
    same file; the second remove found it gone and failed the checkpoint."""
    run = str(tmp_path)
    for version in (1, 2):
        ckpt.save(run, {"policy_version": version, "x": torch.zeros(1)}, keep=2)
    oldest = ckpt.list_checkpoints(run)[0]
    real_list = ckpt.list_checkpoints

    def stale_listing(run_dir):  # listed before the other writer removed it
        paths = real_list(run_dir)
        return [oldest, *paths] if oldest not in paths else paths

    os.remove(oldest)  # the other writer's prune
    ckpt.list_checkpoints = stale_listing
    try:
        ckpt.save(run, {"policy_version": 3, "x": torch.zeros(1)}, keep=2)
    finally:
        ckpt.list_checkpoints = real_list
    assert [os.path.basename(p) for p in ckpt.list_checkpoints(run)] == ["checkpoint_000000002.pt",
                                                                        "checkpoint_000000003.pt"]


@pytest.mark.parametrize("failing", ["checksum", "figures"])
def test_a_step_that_fails_at_the_end_of_a_failed_run_leaves_the_summary_and_the_first_error(
        tmp_path, monkeypatch, failing):
    """The end of a run is a fixed sequence whose every step runs whatever became of the one before
    (docs/run-directory.md#when-a-run-ends): a run that failed (its workers did not start), then a
    parameter that would not checksum, or the summary's figures that could not be made. summary.json
    is written, saying the run failed, and the run raises its first error (the later one raised past
    the summary and took the first one's place)."""
    from nodes import node as node_module
    from nodes.record import summary as summary_module
    from nodes.sampling.sampler import Sampler

    def no_workers(sampler, phase, seed_rank):
        raise RuntimeError("the first error: the workers did not start")

    def fails(*args):
        raise RuntimeError(f"the {failing} failed")

    monkeypatch.setattr(Sampler, "start", no_workers)
    if failing == "checksum":
        monkeypatch.setattr(summary_module, "param_checksum", fails)
    else:
        monkeypatch.setattr(node_module, "run_summary", fails)
    cfg = compose("env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
                  "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
                  "sampler.batch_size=64", run_dir=str(tmp_path / "run"))
    with pytest.raises(RuntimeError, match="the first error"):
        node_module.Node(cfg).run()
    s = summary(cfg.run_dir)
    assert s["outcome"] == "failed", s
    if failing == "checksum":  # the rest of the summary as always, without a checksum
        assert s["param_checksums"] == [] and s["policy_version"] == 0, s


def test_the_closing_steps_all_run_and_keep_the_first_error(tmp_path, monkeypatch):
    """The processes are stopped and the record closed however the end goes: a closing step that
    raises (here the evaluator's close, after the workers failed to start) is a warning, the steps
    after it still run, and the run raises its first error (the close's error replaced it, and
    the record and the janitor were left open)."""
    from nodes.evaluation.schedule import Evaluation
    from nodes.node import Node
    from nodes.record.run_record import RunRecord
    from nodes.sampling.sampler import Sampler

    closed = []

    def no_workers(sampler, phase, seed_rank):
        raise RuntimeError("the first error: the workers did not start")

    def evaluator_close_fails(evaluation):
        raise RuntimeError("the evaluator would not close")

    real_close, real_release = RunRecord.close, Sampler.release_janitor
    monkeypatch.setattr(Sampler, "start", no_workers)
    monkeypatch.setattr(Evaluation, "close", evaluator_close_fails)
    monkeypatch.setattr(RunRecord, "close", lambda record: (closed.append("record"), real_close(record)))
    monkeypatch.setattr(Sampler, "release_janitor", lambda s: (closed.append("janitor"), real_release(s)))
    cfg = compose("env=gym", "env.id=CartPole-v1", "model.fc_size=32", "model.hidden_size=32",
                  "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16",
                  "sampler.batch_size=64", run_dir=str(tmp_path / "run"))
    with pytest.raises(RuntimeError, match="the first error"):
        Node(cfg).run()
    assert closed == ["record", "janitor"]
    assert summary(cfg.run_dir)["outcome"] == "failed"


def test_what_each_outcome_allows_at_the_end():
    """nodes.run.ending: the first error is the run's; a final collective only where every rank
    left the loop together; a final checkpoint unless the run failed, then only one node's that
    learned anything."""
    from nodes.errors import Stopped, TooFewNodes
    from nodes.run.ending import Ending

    end = Ending()
    assert end.step("a step", lambda: 7) == 7 and end.finished and end.ranks_together and end.over_for_all
    assert end.step("a step", lambda: 1 / 0, otherwise="x") == "x"
    assert end.outcome == "failed" and isinstance(end.error, ZeroDivisionError)
    end.step("a later step", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert end.outcome == "failed" and isinstance(end.error, ZeroDivisionError)  # the first stays
    assert not end.ranks_together and not end.over_for_all
    assert [end.keeps_parameters(learned, solo) for learned, solo in ((1, 1), (1, 0), (0, 1))] == [True, False, False]
    for exc, outcome, together in ((KeyboardInterrupt(), "interrupted", False),
                                   (Stopped(15), "stopped by SIGTERM", True),
                                   (TooFewNodes("below"), "stopped: below sync.min_nodes", True)):
        end = Ending()
        end.ended_by(exc)
        assert (end.outcome, end.ranks_together, end.keeps_parameters(False, False)) == (outcome, together, True)
    assert end.over_for_all  # TooFewNodes: a node that comes later has nothing to join
