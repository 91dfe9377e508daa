"""World detection from the environment a process was started in (no processes needed)."""
import os

import pytest

from sync.world import World, detect, first_host, launched_size, port_for_job


def test_no_world_for_a_plain_process_or_a_slurm_batch_script():
    assert detect({}) is None
    # the batch script of an sbatch job has SLURM_PROCID but no step: it is not a world
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}) is None
    assert detect({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "1234"}) is None


def test_torchrun_environment():
    w = detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"})
    assert w == World(1, 4, 1, "10.0.0.5", 29500, "env")


def test_slurm_step_environment_derives_port_from_job_and_step_ids():
    env = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "0",
           "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456"}
    w = detect(env)
    assert (w.rank, w.size, w.local_rank, w.source) == (1, 2, 0, "slurm")
    assert w.master_port == port_for_job("123456", "0")
    assert w.master_addr == "gpu07"  # first host of the step, by scontrol or by our parser


@pytest.mark.parametrize("nodelist,host", [("n1", "n1"), ("n[1-3]", "n1"), ("gpu[07,09-10],cpu1", "gpu07")])
def test_first_host_without_scontrol(monkeypatch, nodelist, host):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert first_host(nodelist) == host


def test_derived_ports_avoid_privileged_and_ephemeral_ports_and_tell_jobs_and_steps_apart():
    ports = {port_for_job(str(job), str(step)) for job in range(100000, 100400) for step in range(3)}
    assert all(1024 <= p < 32768 for p in ports)  # Linux's ephemeral ports start at 32768
    assert len(ports) > 1000  # 1200 job/step pairs (a hash: about 1145 distinct), not 400 jobs
    assert port_for_job("123456") != port_for_job("143456")  # ids 20000 apart
    assert port_for_job("123456", "0") != port_for_job("123456", "1")
    assert port_for_job("123456", "1") == port_for_job("123456", "1")  # the same on every task


def test_rank_without_port_is_refused():
    with pytest.raises(RuntimeError, match="MASTER_PORT"):
        detect({"RANK": "0", "WORLD_SIZE": "2"})


def test_the_ranks_torchrun_or_srun_started_are_the_runs_node_count():
    """launch.cli.app.check takes it as `nodes`: sync.min_nodes=2 under torchrun needs no nodes=2."""
    from launch.cli.app import check
    from tests.helpers import compose

    assert launched_size({}) == 1 and launched_size({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0"}) == 1
    assert launched_size({"RANK": "1", "WORLD_SIZE": "3", "MASTER_PORT": "1"}) == 3
    assert launched_size({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}) == 2
    cfg = compose("sync.min_nodes=2")
    os.environ.update(RANK="0", WORLD_SIZE="2", MASTER_PORT="1")
    try:
        check(cfg)
    finally:
        for k in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
            del os.environ[k]
    assert cfg.nodes == 2
