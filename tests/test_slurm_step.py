"""launch.slurm.step: where the ranks of a Slurm step meet. Rank 0 publishes a free port in the run
directory; the others read it, never an earlier run's (a requeued job has the same ids). No
cluster needed: the step's environment is given."""
import os
import threading

import pytest

from launch.slurm.step import master_port, port_file, prepare_env
from tests.helpers import compose


def step_env(procid, restart="0", job="4242", step="0"):
    env = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": step, "SLURM_PROCID": str(procid), "SLURM_STEP_NUM_TASKS": "2",
           "SLURM_STEP_NODELIST": "n[1-2]", "MASTER_ADDR": "n1"}
    if restart != "0":
        env["SLURM_RESTART_COUNT"] = restart
    return env


def test_rank_0_publishes_a_free_port_the_others_read(tmp_path):
    run_dir = str(tmp_path)
    got = {}
    reader = threading.Thread(target=lambda: got.update(r1=master_port(run_dir, step_env(1), 10)))
    reader.start()  # before rank 0 wrote anything: it waits for the file
    port = master_port(run_dir, step_env(0), 10)
    reader.join()
    assert got["r1"] == port and 1024 <= port <= 65535
    assert open(port_file(run_dir, step_env(0))).read().split() == ["0", str(port)]


def test_a_requeued_run_never_reads_the_port_of_the_run_before(tmp_path):
    run_dir = str(tmp_path)
    master_port(run_dir, step_env(0), 10)
    with pytest.raises(SystemExit, match="published no port"):  # restart 1's rank 0 has not written yet
        master_port(run_dir, step_env(1, restart="1"), 0.5)
    second = master_port(run_dir, step_env(0, restart="1"), 10)
    assert master_port(run_dir, step_env(1, restart="1"), 10) == second
    assert open(port_file(run_dir, step_env(0))).read().split() == ["1", str(second)]  # replaced, not added


def test_steps_and_jobs_publish_apart(tmp_path):
    run_dir = str(tmp_path)
    paths = {port_file(run_dir, step_env(0, job=j, step=s)) for j in ("4242", "24242") for s in ("0", "1")}
    assert len(paths) == 4


def test_prepare_env_sets_the_published_port_only_for_a_fixed_world(tmp_path):
    fixed = compose("sync.elastic=false", run_dir=str(tmp_path))
    env = step_env(0)
    prepare_env(fixed, env)
    assert env["MASTER_PORT"] == open(port_file(str(tmp_path), env)).read().split()[1]
    env = step_env(1)
    prepare_env(fixed, env)  # rank 1 reads what rank 0 published
    assert env["MASTER_PORT"] == open(port_file(str(tmp_path), env)).read().split()[1]

    elastic = compose(run_dir=str(tmp_path / "elastic"))  # meets through the rendezvous file: no port
    env = step_env(0)
    prepare_env(elastic, env)
    assert "MASTER_PORT" not in env and not os.path.exists(tmp_path / "elastic")

    given = compose("sync.elastic=false", "sync.master_port=29123", run_dir=str(tmp_path / "given"))
    env = step_env(1)
    prepare_env(given, env)  # sync.master_port wins, and no one waits for a file
    assert env["MASTER_PORT"] == "29123"

    env = dict(step_env(1), RANK="1", WORLD_SIZE="2")  # torchrun's world inside the step: left alone
    prepare_env(fixed, env)
    assert "MASTER_PORT" not in env


def test_a_slurm_task_is_reached_at_its_nodes_address_not_one_it_inherited(monkeypatch):
    """DISTRL_NODE_ADDR becomes the node's NodeAddr, tagged with the node: a job submitted from inside
    another node's job inherits that node's, and finds its own; one set by hand (or by our local
    spawner, for its children on this node) stays."""
    import launch.slurm.step as step
    monkeypatch.setattr(step, "node_addr", lambda name: {"n1": "10.0.0.1", "n2": "10.0.0.2"}[name])
    cfg = compose("sync.elastic=true")
    env = {"SLURMD_NODENAME": "n1"}
    prepare_env(cfg, env)
    assert env["DISTRL_NODE_ADDR"] == "10.0.0.1" and env[step.ADDR_NODE] == "n1"
    env["SLURMD_NODENAME"] = "n2"  # inherited by a job on n2
    prepare_env(cfg, env)
    assert env["DISTRL_NODE_ADDR"] == "10.0.0.2" and env[step.ADDR_NODE] == "n2"
    env = {"SLURMD_NODENAME": "n2", "DISTRL_NODE_ADDR": "127.0.0.1"}
    prepare_env(cfg, env)
    assert env["DISTRL_NODE_ADDR"] == "127.0.0.1"
