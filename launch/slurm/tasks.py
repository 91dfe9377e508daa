"""What each task of a launcher=slurm job runs: submitit pickles these and calls them in the job."""
from __future__ import annotations

import logging
import os
import signal

from launch.slurm.preemption import run_slurm_rank
from launch.slurm.step import prepare_env

log = logging.getLogger("launch.slurm")


class SlurmTask:
    """What every task of a launcher=slurm job runs (submitit pickles it): rank SLURM_PROCID of the
    run in run_dir, from the config.yaml the submitting command wrote."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __call__(self) -> int:
        from launch.process.logs import rank_logging
        from launch.process.resolved import read_resolved
        from sync.world import detect

        cfg = read_resolved(self.run_dir)
        prepare_env(cfg)
        world = detect()
        rank_logging(cfg.run_dir, world.rank if world else 0)
        code = run_slurm_rank(cfg, world)
        if code:
            raise SystemExit(code)  # no submitit result: the task (and the job) fails with this code
        return 0

    def checkpoint(self):
        """submitit's own handler of the signal (only outside training, where nothing new is
        unsaved): requeue the same task; it resumes from the latest checkpoint."""
        import submitit
        return submitit.helpers.DelayedSubmission(type(self)(self.run_dir))


class SlurmArrayTask(SlurmTask):
    """What every element of a launcher.array=true job array runs: node SLURM_ARRAY_TASK_ID of the
    elastic run in run_dir. The elements form the first world together (sync.rendezvous); a
    requeued element comes back with the same id and joins the world the others kept going.

    Signals: SIGTERM (scancel of the element, `scontrol requeue`, a preemption) ends this node at
    once; the others lose it and go on (one batch dropped), rather than the whole run stopping
    as in one job. The preemption signal (launcher.signal, before the time limit) is a stop vote
    as in one job: every element stops after the same iteration, the writer checkpoints, and each
    element requeues itself."""

    def __call__(self) -> int:
        from launch.process.logs import rank_logging
        from launch.process.resolved import read_resolved
        from launch.spawn.ranks import make_rendezvous
        from sync.world import World

        cfg = read_resolved(self.run_dir)
        prepare_env(cfg)  # one task: only this node's address
        node = int(os.environ["SLURM_ARRAY_TASK_ID"])
        rendezvous = make_rendezvous(cfg, node)
        rank_logging(cfg.run_dir, node)
        signal.signal(signal.SIGTERM, _leave_now)  # not a vote: this element alone goes
        code = run_slurm_rank(cfg, World(node, cfg.nodes, 0, "", 0, "slurm-array"), rendezvous)
        if code:
            raise SystemExit(code)
        return 0


def _leave_now(signum, frame) -> None:
    """An array element told to go (SIGTERM): leave at once; the janitor ends the workers, the
    store keeper ends with this process, the others re-form the world without this node."""
    log.warning("node leaves the run on signal %d (the others go on without it)", signum)
    for h in logging.getLogger().handlers:
        h.flush()
    os._exit(128 + signum)
