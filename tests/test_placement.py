"""nodes.sampling.placement: device, ranks per host and core split as pure functions over faked
environments (torchrun, `srun -n`, submitit, the local spawner, per-task GPU binding)."""
from __future__ import annotations

import pytest

from nodes.errors import ConfigError
from nodes.sampling.placement import (
    choose_device,
    core_share,
    cpu_has_bf16,
    expand_tasks_per_node,
    place,
    plan_processes,
    ranks_per_host,
    worker_cpus,
)
from tests.helpers import compose


def test_slurm_task_counts_expand():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    assert expand_tasks_per_node("") == []


@pytest.mark.parametrize("env, expected", [
    ({"LOCAL_WORLD_SIZE": "4", "SLURM_STEP_TASKS_PER_NODE": "8"}, 4),  # torchrun / launch.spawn.local win
    # `srun -n 12` over two nodes sets no SLURM_NTASKS_PER_NODE: the step's own counts do
    ({"SLURM_STEP_TASKS_PER_NODE": "7,5", "SLURM_NODEID": "1"}, 5),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "9"}, 2),
    ({"SLURM_TASKS_PER_NODE": "3(x2)", "SLURM_NODEID": "0"}, 3),
    ({"SLURM_NTASKS_PER_NODE": "2"}, 2),
    ({}, 1),
])
def test_ranks_per_host(env, expected):
    assert ranks_per_host(env) == expected


def test_one_gpu_per_rank_with_all_gpus_visible_or_per_task_binding():
    assert choose_device("cpu", 3, 4, 0, "gloo", {}) == "cpu"
    assert choose_device("cuda", 2, 4, 4, "nccl", {}) == "cuda:2"  # every GPU visible: by local rank
    # per-task binding: every task sees only its own GPU as cuda:0; Slurm says the node has 4
    assert choose_device("cuda", 2, 4, 1, "nccl", {"SLURM_GPUS_ON_NODE": "4"}) == "cuda:0"
    assert choose_device("cuda:1", 0, 1, 2, "nccl", {}) == "cuda:1"


@pytest.mark.parametrize("args, words", [
    (("cuda", 0, 1, 0, "nccl", {"CUDA_VISIBLE_DEVICES": ""}), ["no CUDA device is visible", "host",
                                                              "CUDA_VISIBLE_DEVICES="]),
    (("cuda", 1, 2, 1, "nccl", {}), ["2 ranks on host", "one rank per GPU"]),  # one GPU for two ranks
    (("cuda", 3, 4, 2, "nccl", {}), ["4 ranks", "2 visible GPU"]),
    (("cuda:0", 1, 2, 2, "nccl", {}), ["all 2 ranks", "one GPU", "train.device=cuda"]),
    (("cuda:3", 0, 1, 2, "nccl", {}), ["only 2 CUDA device"]),
])
def test_impossible_gpu_layouts_are_refused_in_one_line(args, words):
    with pytest.raises(ConfigError) as info:
        choose_device(*args)
    msg = str(info.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_gloo_lets_ranks_share_a_gpu():
    """NCCL refuses two ranks on one GPU; gloo (sync.backend=gloo) does not: what a one-GPU box
    runs `nodes=2 train.device=cuda` with."""
    assert choose_device("cuda", 1, 2, 1, "gloo", {}) == "cuda:0"
    assert choose_device("cuda", 3, 4, 2, "gloo", {}) == "cuda:1"


def test_cores_split_between_ranks_unless_slurm_bound_them():
    host = list(range(16))
    assert core_share(host, 1, 4, bound=False) == [4, 5, 6, 7]
    assert core_share(host, 0, 1, bound=False) == host
    # under Slurm CPU binding the affinity already is this task's share: not divided again
    assert core_share([8, 9, 10, 11], 2, 4, bound=True) == [8, 9, 10, 11]
    assert core_share([0, 1], 1, 4, bound=False) == [1]  # more ranks than cores: one each, shared


def test_process_plan_cpu_learner_takes_the_free_cores_and_gpu_reserves_feeders():
    # CPU: workers round-robin over the share from pin_offset; the learner's threads are the cores
    # the rollout and policy workers leave, at least one
    assert plan_processes([0, 1], 2, 1, on_cuda=False, learner_threads=0) == (2, [0, 1], 1)
    assert plan_processes(list(range(16)), 4, 1, on_cuda=False, learner_threads=0)[2] == 11
    assert plan_processes(list(range(16)), "auto", 2, on_cuda=False, learner_threads=0) == (13, list(range(16)), 1)
    assert plan_processes([0, 1, 2, 3], 2, 1, on_cuda=False, learner_threads=0, pin_offset=1)[1] == [1, 2, 3, 0]
    # GPU: learner + policy worker keep the first cores, 1-2 learner threads, auto = the rest
    assert plan_processes(list(range(10)), "auto", 2, on_cuda=True, learner_threads=0) == (7, list(range(3, 10)), 2)
    assert plan_processes([0, 1], "auto", 1, on_cuda=False, learner_threads=3) == (1, [0, 1], 3)
    # sync sampling: the workers wait while the learner learns, so it takes every core
    assert plan_processes([0, 1], 2, 1, on_cuda=False, learner_threads=0, learns_alone=True) == (2, [0, 1], 2)
    assert plan_processes([0, 1], 2, 1, on_cuda=False, learner_threads=1, learns_alone=True)[2] == 1


def test_place_a_slurm_gpu_task():
    cfg = compose("train.device=cuda", "sampler.num_workers=auto")
    env = {"SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1", "SLURM_LOCALID": "3",
           "SLURM_CPU_BIND_TYPE": "mask_cpu:", "SLURM_GPUS_ON_NODE": "4"}
    p = place(cfg, env, visible_gpus=1, affinity=range(24, 32), solo=False)
    assert (p.device, p.policy_device, p.num_workers, p.learner_threads) == ("cuda:0", "cuda:0", 6, 2)
    assert p.worker_cores == list(range(26, 32))


def test_place_solo_ignores_the_allocations_task_count():
    """The single-node fallback inside a multi-task allocation (salloc -n4; python -m launch.train)
    is alone on its host: all the cores, no GPU index from a local rank."""
    cfg = compose()
    p = place(cfg, {"SLURM_TASKS_PER_NODE": "4", "SLURM_LOCALID": "2"}, 0, [0, 1, 2, 3], solo=True)
    assert (p.device, p.num_workers, p.worker_cores, p.learner_threads) == ("cpu", 2, [0, 1, 2, 3], 1)


def test_rollout_workers_are_pinned_only_where_the_learner_keeps_off_their_cores():
    """sampler.pin_workers=auto: a CPU node's rollout workers share their cores with the learner and
    the policy worker, and one pinned to a core waits there while the other idles, so they may run
    on any core of the rank's share; a GPU rank whose learner and policy workers keep cores of
    their own pins each worker to one core. true and false are kept as given."""
    def pinned(*overrides, device="cpu", cores=range(4)):
        cfg = compose(f"train.device={device}", "sampler.num_workers=auto", *overrides)
        p = place(cfg, {}, visible_gpus=1 if device == "cuda" else 0, affinity=cores, solo=True)
        return p.pin_workers, [worker_cpus(p.pin_workers, p.worker_cores, w) for w in range(p.num_workers)]

    assert pinned() == (False, [{0, 1, 2, 3}] * 2)  # the default: auto
    assert pinned(device="cuda", cores=range(6)) == (True, [{2}, {3}, {4}, {5}])  # learner + policy on 0, 1
    assert pinned(device="cuda", cores=range(2))[0] is False  # too few cores to keep any apart
    assert pinned("sampler.pin_workers=true") == (True, [{0}, {1}])
    assert pinned("sampler.pin_workers=false", device="cuda", cores=range(6)) == (False, [{2, 3, 4, 5}] * 4)
    # the one-line refusal, before any process starts
    with pytest.raises(ConfigError, match="sampler.pin_workers must be auto, true or false, got 'yes'"):
        from nodes.config.validate import validate
        validate(compose("sampler.pin_workers=yes"))


def test_a_worker_runs_on_the_cores_it_was_given():
    """boot_worker (every worker's first step) applies the affinity WorkerPool chose."""
    import multiprocessing
    import os

    from nodes.sampling.processes import boot_worker

    def child(cpus, out):
        boot_worker(os.getpgid(0), cpus, gpu=False)
        out.put(sorted(os.sched_getaffinity(0)))

    mine = sorted(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("fork")
    for cpus, expected in (({mine[-1]}, [mine[-1]]), (set(mine), mine)):
        out = ctx.Queue()
        p = ctx.Process(target=child, args=(cpus, out))
        p.start()
        assert out.get(timeout=30) == expected
        p.join(30)


def test_policy_device_defaults_to_the_learners():
    cfg = compose("train.device=cuda", "sampler.policy_device=cpu")
    p = place(cfg, {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 2, range(8), solo=False)
    assert (p.device, p.policy_device) == ("cuda:1", "cpu")


def test_cuda_on_a_host_without_a_gpu_fails_where_the_rank_starts_in_one_line(tmp_path):
    """The check runs where the rank starts (here: this CPU-only host), naming the host; the
    submitting side no longer refuses it (a login node without a GPU submits GPU jobs)."""
    import socket

    from tests.helpers import one_error_line, run_module

    proc = run_module("launch.train", f"hydra.run.dir={tmp_path}/run", "env=gym", "train.device=cuda",
                      check=False, timeout=120)
    assert proc.returncode == 2
    one_error_line(proc)
    assert f"no CUDA device is visible on host {socket.gethostname()}" in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_precision_auto_is_bf16_only_where_every_device_of_the_rank_has_bf16_units():
    fast = {"cuda:0"}.__contains__  # a GPU with bf16 units, a CPU without
    gpu = compose("train.device=cuda")
    assert place(gpu, {}, 1, range(8), solo=True, bf16_fast=fast).precision == "bf16"
    mixed = compose("train.device=cuda", "sampler.policy_device=cpu")  # CPU inference: no bf16 units there
    assert place(mixed, {}, 1, range(8), solo=True, bf16_fast=fast).precision == "fp32"
    assert place(compose(), {}, 0, range(2), solo=True, bf16_fast=fast).precision == "fp32"
    assert place(compose(), {}, 0, range(2), solo=True, bf16_fast=lambda d: True).precision == "bf16"
    # an explicit choice is kept whatever the hardware
    assert place(compose("train.precision=bf16"), {}, 0, range(2), solo=True).precision == "bf16"
    assert place(compose("train.precision=fp32"), {}, 0, range(2), solo=True, bf16_fast=lambda d: True
                 ).precision == "fp32"


def test_cpu_bf16_units_are_read_from_cpuinfo():
    avx512 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n"
    assert not cpu_has_bf16(avx512)  # AVX-512 without BF16: bf16 would be emulated
    assert cpu_has_bf16(avx512.replace("avx512_vnni", "avx512_vnni avx512_bf16"))
    assert cpu_has_bf16("processor\t: 0\nflags\t\t: avx2 amx_bf16 amx_tile\n")
    assert cpu_has_bf16("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")  # Arm (Graviton 3)
    assert not cpu_has_bf16("processor\t: 0\nFeatures\t: fp asimd\n") and not cpu_has_bf16("")
