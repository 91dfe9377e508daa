"""Slurm: `launcher=slurm` submits one job through submitit; any rank in a Slurm step handles
preemption by checkpointing and requeueing.

`python -m launch.train launcher=slurm nodes=N` (conf/launcher/slurm.yaml) writes the resolved
config to the run directory and submits ONE job of N / launcher.tasks_per_node nodes with
launcher.tasks_per_node tasks on each. Every task runs `SlurmTask(run_dir)`: the same resolved
config, as rank SLURM_PROCID of the world sync.world.detect finds in the step. submitit keeps its
files (batch script, stdout/stderr of every task) in <run_dir>/slurm/. The command prints the job
id and the run directory and returns; with launcher.wait=true it waits, streams rank 0's log
(<run_dir>/train.log) and exits 0 only when the job ends COMPLETED.

Preemption and time limits (`run_slurm_rank`, for SlurmTask, `srun python -m launch.train` and
Hydra's submitit launcher alike): the job asks for launcher.signal (USR2; NCCL may use USR1)
launcher.signal_delay_s before its time limit. Slurm sends it to every process of the step, so
every rank votes to stop (the node's stop signals); all stop after the same iteration, rank 0
writes the final checkpoint, then requeues the job (`scontrol requeue`), and the next run of the
job resumes from that checkpoint (weights, optimizer, frame counter). SIGTERM (scancel, an
external `scontrol requeue`, preemption with PreemptMode=REQUEUE) also stops every rank after
the current iteration with a checkpoint, and Slurm itself decides whether the job comes back.

One module per role:
    checks.py      launcher=slurm values and the resources a job asks for (before anything is submitted)
    submit.py      the submission through submitit (the submitting command)
    tasks.py       SlurmTask / SlurmArrayTask: what each task of the job runs
    step.py        inside a step: the address and port its ranks meet at
    preemption.py  a rank under the preemption signal: checkpoint, requeue
    wait.py        launcher.wait=true: following the submitted jobs to their end

submitit is a base dependency; it is imported only where it submits (a rank started by srun does
not need it), and an install without it is refused in one line, before anything runs.
"""
from launch.slurm.checks import check, need_slurm_commands, preempt_signal, resources
from launch.slurm.preemption import run_slurm_rank
from launch.slurm.step import prepare_env, under_hydra_submitit
from launch.slurm.submit import submit
from launch.slurm.tasks import SlurmArrayTask, SlurmTask
from launch.slurm.wait import Submitted, wait_submitted

__all__ = ["check", "need_slurm_commands", "preempt_signal", "resources", "run_slurm_rank", "prepare_env",
           "under_hydra_submitit", "submit", "SlurmTask", "SlurmArrayTask", "Submitted", "wait_submitted"]
