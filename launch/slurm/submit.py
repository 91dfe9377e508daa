"""Submitting a launcher=slurm run through submitit: one job, or one job array element per node."""
from __future__ import annotations

import contextlib
import io
import os
import signal

from launch.process.allocator import job_preload_line, submitting_without_tcmalloc
from launch.slurm.checks import preempt_signal, resources, sbatch_options
from launch.slurm.tasks import SlurmArrayTask, SlurmTask
from launch.slurm.wait import Submitted
from nodes.config.schema import Config
from nodes.errors import ConfigError


def submit(cfg: Config) -> list[Submitted]:
    """Submit the run in cfg.run_dir (config.yaml already written); prints the job id and returns
    the jobs (an array: every element; the first streams the log when waited for)."""
    import submitit

    c = cfg.launcher
    executor = submitit.SlurmExecutor(folder=os.path.join(cfg.run_dir, "slurm"), max_num_timeout=c.max_requeues)
    params = _parameters(cfg)
    try:
        offset = os.path.getsize(os.path.join(cfg.run_dir, "train.log"))  # a wait streams from here
    except OSError:
        offset = 0
    if cfg.sync.elastic:
        from sync.rendezvous import reset
        reset(cfg.run_dir)  # a new launch: the last one's generations are forgotten (a requeue keeps them)
    try:
        executor.update_parameters(**params)
        # submitit echoes sbatch's stderr (one line below); the job's nodes choose their own allocator
        with contextlib.redirect_stderr(io.StringIO()), submitting_without_tcmalloc():
            if c.array:
                with executor.batch():
                    jobs = [executor.submit(SlurmArrayTask(cfg.run_dir)) for _ in range(cfg.nodes)]
            else:
                jobs = [executor.submit(SlurmTask(cfg.run_dir))]
    except Exception as exc:  # noqa: BLE001 - sbatch refusals come back as submitit errors
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines or [repr(exc)]
        raise ConfigError(f"sbatch refused the job: {errors[0]}") from None
    _say_submitted(cfg, [j.job_id for j in jobs])
    return [Submitted(j.job_id, cfg.run_dir if i == 0 else None, offset, c.poll_s) for i, j in enumerate(jobs)]


def _parameters(cfg: Config) -> dict:
    """submitit's SlurmExecutor parameters for the run (those that are set)."""
    c = cfg.launcher
    sig = signal.Signals(preempt_signal(c.signal)).name.removeprefix("SIG")
    params = dict(
        job_name=c.job_name, nodes=1 if c.array else cfg.nodes // c.tasks_per_node, ntasks_per_node=c.tasks_per_node,
        # one job: a task that fails must not end the step's other tasks (sync.elastic re-forms without it)
        srun_args=["--kill-on-bad-exit=0"] if cfg.sync.elastic else None,
        time=c.time_min, signal_delay_s=c.signal_delay_s, stderr_to_stdout=False,
        # requeue: the job requeues itself on the signal (some clusters default to JobRequeue=0);
        # signal: ours, not submitit's default (submitit's own handler gets the same name below)
        additional_parameters={"requeue": True, "signal": f"{sig}@{c.signal_delay_s}", **sbatch_options(c.sbatch)},
        # tcmalloc where the node has it (launch/process/allocator.py), before the user's own lines
        setup=[f"export SUBMITIT_PREEMPT_SIGNAL={sig}", job_preload_line(), *c.setup],
    )
    r = resources(cfg)
    optional = dict(partition=c.partition, account=c.account, qos=c.qos, constraint=c.constraint,
                    gpus_per_node=r["gpus_per_node"], cpus_per_task=r["cpus_per_task"],
                    mem=f"{r['mem_gb']}GB" if r["mem_gb"] else None)
    params.update({k: v for k, v in optional.items() if v})
    return {k: v for k, v in params.items() if v is not None}


def _say_submitted(cfg: Config, job_ids: list[str]) -> None:
    c = cfg.launcher
    where = f"{', partition ' + c.partition if c.partition else ''}; run directory {cfg.run_dir}"
    if c.array:
        print(f"submitted Slurm job array {job_ids[0].split('_')[0]}: {cfg.nodes} element(s) of one node "
              f"(jobs {' '.join(job_ids)}){where}", flush=True)
    else:
        print(f"submitted Slurm job {job_ids[0]}: {cfg.nodes // c.tasks_per_node} node(s) x "
              f"{c.tasks_per_node} task(s){where}", flush=True)
