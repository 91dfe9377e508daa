"""launch.slurm.resources: what a launcher=slurm job asks each node for, derived from the layout
on GPU nodes (whose Slurm defaults are one core and little memory), and refused in one line
when it cannot be derived or cannot work. Pure: nothing is submitted."""
import pytest

from launch.slurm import check, resources
from nodes.errors import ConfigError
from tests.helpers import compose


def test_cpu_jobs_keep_slurms_defaults():
    assert resources(compose("launcher=slurm", "nodes=2")) == dict(gpus_per_node=0, cpus_per_task=0, mem_gb=0)


def test_gpu_jobs_get_a_gpu_per_task_a_core_per_process_and_memory_for_the_buffers():
    r = resources(compose("launcher=slurm", "nodes=8", "launcher.tasks_per_node=4", "train.device=cuda",
                          "sampler.num_workers=30", "sampler.envs_per_worker=16", "sampler.num_policy_workers=2"))
    assert r["gpus_per_node"] == 4 and r["cpus_per_task"] == 33
    # 4 ranks, each ~0.85 GB of /dev/shm buffers plus its 33 processes: tens of GB, not Slurm's default
    assert 60 <= r["mem_gb"] <= 120, r
    small = resources(compose("launcher=slurm", "train.device=cuda"))
    assert small["mem_gb"] < r["mem_gb"] / 4
    # what the user sets wins
    assert resources(compose("launcher=slurm", "train.device=cuda", "launcher.cpus_per_task=12",
                             "launcher.mem_gb=50", "launcher.gpus_per_node=2")) == \
        dict(gpus_per_node=2, cpus_per_task=12, mem_gb=50)


@pytest.mark.parametrize("overrides, words", [
    (["nodes=4", "launcher.tasks_per_node=2", "launcher.gpus_per_node=1"],
     "launcher.gpus_per_node (1) must be >= launcher.tasks_per_node (2)"),
    (["nodes=2", "launcher.tasks_per_node=2", "train.device=cuda:1"], "use train.device=cuda"),
    (["sampler.num_workers=auto"], "needs launcher.cpus_per_task"),
])
def test_impossible_gpu_jobs_are_refused_before_submitting(overrides, words):
    cfg = compose("launcher=slurm", "train.device=cuda", *overrides)
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check(cfg)
