"""Where the env processes work: in the directory the run was launched from, so that an env's
relative path (crafter's stats_dir, RecordVideo's folder) lands where the user pointed it; only
VizDoom's engines, which write their own files into the working directory, work in a directory of
their own under run_dir/.workers/, named by host and pid, which each node's janitor removes for its
own host only (nodes on several hosts share the run directory, and containers repeat pids)."""
import os

from helpers import ROOT, train

from nodes.envs import workdir_path
from nodes.janitor import host_tag, remove_workdirs

TINY = ["env=gym", "env.id=tests.envs:EpisodeLog-v0", "model.fc_size=16", "model.hidden_size=16",
        "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=64",
        "train.max_env_frames=2000", "eval.every_frames=1000", "eval.episodes=2"]


def test_a_relative_path_in_env_kwargs_lands_where_the_run_was_launched(run_dir):
    """docs/your-environment.md: relative paths resolve in the directory the run was launched from
    (helpers.train launches from ROOT). The rollout workers and the evaluator made their envs in
    run_dir/.workers/<name>_pid<pid>, removed at their end: the file went with it."""
    target = os.path.join(os.path.dirname(run_dir), "stats", "episodes.txt")
    train(run_dir, *TINY, f"+env.kwargs.path={os.path.relpath(target, ROOT)}", timeout=180)
    assert os.path.isfile(target), "the env's relative path did not resolve where the run was launched"
    pids = open(target).read().split()
    assert len(pids) >= 2000 // 8 // 2, f"{len(pids)} episodes logged"  # the launch's check steps none
    assert len(set(pids)) >= 2, "the rollout worker's and the evaluator's envs: both write there"
    assert not os.path.exists(os.path.join(run_dir, ".workers")), "a gymnasium env needs no directory of its own"


def test_the_janitor_removes_its_own_hosts_work_directories_only(tmp_path):
    """Another host's worker of the same pid (a container's pids repeat) keeps its directory, as
    does one of a host whose name ends in ours; this host's goes."""
    run_dir, pid = str(tmp_path), 4242
    mine = workdir_path(run_dir, "rollout0", pid)
    others = [os.path.join(run_dir, ".workers", f"rollout0_{host}_pid{pid}")
              for host in ("otherhost", f"a-{host_tag()}")]
    for path in (mine, *others):
        os.makedirs(path)
    remove_workdirs(run_dir, [pid])
    assert not os.path.exists(mine), "this host's worker directory was left"
    assert all(os.path.isdir(path) for path in others), "another host's live worker directory was removed"
    assert os.path.basename(mine) == f"rollout0_{host_tag()}_pid{pid}" and "_" not in host_tag()
