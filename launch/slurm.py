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

submitit is a base dependency; this module imports it only where it submits (a rank started by
srun does not need it), and an install without it is refused in one line, before anything runs.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from nodes.config import Config
from nodes.errors import ConfigError, need
from nodes.signals import DEFAULT as DEFAULT_STOP_SIGNALS

log = logging.getLogger("launch.slurm")

# States of a job that is not over: waiting, running, or on its way to run again (a requeued job
# passes through these); any other state is final.
ACTIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED",
                 "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT",
                 "RESV_DEL_HOLD", "POWER_UP_NODE", "UPDATE_DB"}
# launcher.wait=true: (job id, run dir, log offset, poll_s); an array's later elements have no run dir (the
# first streams the log)
_waiting: list[tuple[str, str | None, int, float]] = []


# ----------------------------------------------------------------------------- checks
def preempt_signal(name: str) -> int:
    sig = getattr(signal, "SIG" + name.upper().removeprefix("SIG"), None)
    if not isinstance(sig, signal.Signals) or sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ConfigError(f"launcher.signal must name a catchable signal such as USR2, got '{name}'")
    return int(sig)


def check(cfg: Config) -> None:
    """launcher=slurm values; raises ConfigError with one line. Nothing is submitted before."""
    c = cfg.launcher
    need(c.tasks_per_node >= 1, f"launcher.tasks_per_node must be >= 1, got {c.tasks_per_node}")
    need(cfg.nodes % c.tasks_per_node == 0,
         f"nodes ({cfg.nodes}) must be a multiple of launcher.tasks_per_node ({c.tasks_per_node}): "
         "every Slurm node runs the same number of ranks")
    need(c.time_min >= 1, f"launcher.time_min must be >= 1 (minutes), got {c.time_min}")
    for key in ("gpus_per_node", "cpus_per_task", "mem_gb", "signal_delay_s", "max_requeues"):
        need(getattr(c, key) >= 0, f"launcher.{key} must be >= 0, got {getattr(c, key)}")
    need(c.signal_delay_s < c.time_min * 60,
         f"launcher.signal_delay_s ({c.signal_delay_s}) must be shorter than the time limit "
         f"(launcher.time_min={c.time_min} min)")
    need(c.poll_s > 0, f"launcher.poll_s must be > 0, got {c.poll_s}")
    need(not c.array or cfg.sync.elastic, "launcher.array=true needs sync.elastic=true: its elements join and "
         "leave the run one by one")
    need(not c.array or c.tasks_per_node == 1, "launcher.array=true runs one node per array element: "
         f"launcher.tasks_per_node must be 1, got {c.tasks_per_node}")
    preempt_signal(c.signal)
    need(bool(re.fullmatch(r"[A-Za-z0-9_.-]+", c.job_name)),
         f"launcher.job_name must be letters, digits, '_', '.', '-', got '{c.job_name}'")
    sbatch_options(c.sbatch)
    need(all(isinstance(line, str) for line in c.setup), "launcher.setup must be a list of shell lines")
    resources(cfg)


# per process of a rank, resident memory besides the shared buffers (measured on CPU; a CUDA
# context adds about 0.5 GB to each process that opens one)
LEARNER_GB, POLICY_WORKER_GB, ROLLOUT_WORKER_GB, CUDA_CONTEXT_GB = 1.5, 0.5, 0.4, 0.5


def shared_buffers_gb(cfg: Config) -> float:
    """The trajectory buffers one rank allocates in /dev/shm (observations dominate)."""
    import math

    from nodes.config import num_slots
    from nodes.envs import env_spec

    spec = env_spec(cfg.env)
    import numpy as np

    obs_bytes = math.prod(spec.obs_shape) * np.dtype(spec.obs_dtype).itemsize
    s = cfg.sampler
    return num_slots(s, cfg.population.size) * (s.rollout + 1) * (obs_bytes + 4 * spec.meas_size + 64) / 2**30


def resources(cfg: Config) -> dict:
    """What one Slurm node is asked for: {gpus_per_node, cpus_per_task, mem_gb}, 0 = Slurm's
    default. With train.device=cuda: a GPU per task unless set, and cores and memory derived from
    the layout (a GPU node's Slurm defaults are one core and little memory); ConfigError when
    they cannot be derived or cannot fit."""
    c, s = cfg.launcher, cfg.sampler
    cuda = cfg.train.device.startswith("cuda")
    auto = s.num_workers == "auto"
    gpus = c.gpus_per_node or (c.tasks_per_node if cuda else 0)
    need(not cuda or gpus >= c.tasks_per_node,
         f"launcher.gpus_per_node ({gpus}) must be >= launcher.tasks_per_node ({c.tasks_per_node}) with "
         "train.device=cuda: one GPU per rank")
    need(not cuda or ":" not in cfg.train.device or c.tasks_per_node == 1,
         f"train.device={cfg.train.device} with launcher.tasks_per_node={c.tasks_per_node} puts every rank of a "
         "node on one GPU: use train.device=cuda")
    need(c.cpus_per_task or not auto,
         "sampler.num_workers=auto with launcher=slurm needs launcher.cpus_per_task (the cores each rank gets)")
    cpus = c.cpus_per_task
    if not cpus and cuda:  # a rollout worker per core, plus the learner and the policy workers
        cpus = s.num_workers + s.num_policy_workers + 1
    mem = c.mem_gb
    if not mem and cuda:
        workers = (cpus - s.num_policy_workers - 1) if auto else s.num_workers
        resolved = copy.deepcopy(cfg)
        resolved.sampler.num_workers = max(1, workers)
        per_task = (shared_buffers_gb(resolved) + LEARNER_GB + s.num_policy_workers * POLICY_WORKER_GB
                    + (1 + s.num_policy_workers) * CUDA_CONTEXT_GB + max(1, workers) * ROLLOUT_WORKER_GB)
        mem = math.ceil(1.25 * per_task * c.tasks_per_node)  # 25% headroom
    return dict(gpus_per_node=gpus, cpus_per_task=cpus, mem_gb=mem)


SET_BY_LAUNCHER = ("nodes", "ntasks", "ntasks-per-node", "output", "error", "signal", "open-mode", "array")


def sbatch_options(items) -> dict:
    """launcher.sbatch ["--exclusive", "--mail-type=END"] -> submitit's additional_parameters."""
    out = {}
    for item in items:
        m = re.fullmatch(r"--([A-Za-z][A-Za-z0-9-]*)(?:=(.*))?", str(item))
        if not m:
            raise ConfigError(f"launcher.sbatch takes long sbatch options such as --exclusive or --mail-type=END, "
                              f"got '{item}'")
        if m.group(1) in SET_BY_LAUNCHER:
            raise ConfigError(f"launcher.sbatch: --{m.group(1)} is set by the launcher (nodes=, "
                              "launcher.tasks_per_node=, launcher.signal=, <run_dir>/slurm/)")
        out[m.group(1).replace("-", "_")] = True if m.group(2) is None else m.group(2)
    return out


def need_slurm_commands() -> None:
    try:
        import submitit  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"launcher=slurm needs submitit ({exc}): pip install submitit") from None
    for tool in ("sbatch", "srun", "scontrol"):
        if shutil.which(tool) is None:
            raise ConfigError(f"{tool} not found: launcher=slurm submits with the Slurm client commands "
                              "(sbatch, srun, scontrol); run it where they are on PATH")


# ----------------------------------------------------------------------------- submitting
def submit(cfg: Config) -> str:
    """Submit the run in cfg.run_dir (config.yaml already written); prints and returns the job id."""
    import submitit

    c = cfg.launcher
    sig = signal.Signals(preempt_signal(c.signal)).name.removeprefix("SIG")
    executor = submitit.SlurmExecutor(folder=os.path.join(cfg.run_dir, "slurm"), max_num_timeout=c.max_requeues)
    params = dict(
        job_name=c.job_name, nodes=1 if c.array else cfg.nodes // c.tasks_per_node, ntasks_per_node=c.tasks_per_node,
        # one job: a task that fails must not end the step's other tasks (sync.elastic re-forms without it)
        srun_args=["--kill-on-bad-exit=0"] if cfg.sync.elastic else None,
        time=c.time_min, signal_delay_s=c.signal_delay_s, stderr_to_stdout=False,
        # requeue: the job requeues itself on the signal (some clusters default to JobRequeue=0);
        # signal: ours, not submitit's default (submitit's own handler gets the same name below)
        additional_parameters={"requeue": True, "signal": f"{sig}@{c.signal_delay_s}", **sbatch_options(c.sbatch)},
        setup=[f"export SUBMITIT_PREEMPT_SIGNAL={sig}", *c.setup],
    )
    r = resources(cfg)
    optional = dict(partition=c.partition, account=c.account, qos=c.qos, constraint=c.constraint,
                    gpus_per_node=r["gpus_per_node"], cpus_per_task=r["cpus_per_task"],
                    mem=f"{r['mem_gb']}GB" if r["mem_gb"] else None)
    params.update({k: v for k, v in optional.items() if v})
    try:
        offset = os.path.getsize(os.path.join(cfg.run_dir, "train.log"))  # wait=true streams from here
    except OSError:
        offset = 0
    if cfg.sync.elastic:
        from sync.rendezvous import reset
        reset(cfg.run_dir)  # a new launch: the last one's generations are forgotten (a requeue keeps them)
    try:
        executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
        with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr: one line below
            if c.array:
                with executor.batch():
                    jobs = [executor.submit(SlurmArrayTask(cfg.run_dir)) for _ in range(cfg.nodes)]
            else:
                jobs = [executor.submit(SlurmTask(cfg.run_dir))]
    except Exception as exc:  # noqa: BLE001 - sbatch refusals come back as submitit errors
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines or [repr(exc)]
        raise ConfigError(f"sbatch refused the job: {errors[0]}") from None
    where = f"{', partition ' + c.partition if c.partition else ''}; run directory {cfg.run_dir}"
    if c.array:
        print(f"submitted Slurm job array {jobs[0].job_id.split('_')[0]}: {cfg.nodes} element(s) of one node "
              f"(jobs {' '.join(j.job_id for j in jobs)}){where}", flush=True)
    else:
        print(f"submitted Slurm job {jobs[0].job_id}: {cfg.nodes // c.tasks_per_node} node(s) x "
              f"{c.tasks_per_node} task(s){where}", flush=True)
    if c.wait:
        _waiting.extend((j.job_id, cfg.run_dir if i == 0 else None, offset, c.poll_s) for i, j in enumerate(jobs))
    return jobs[0].job_id


class SlurmTask:
    """What every task of a launcher=slurm job runs (submitit pickles it): rank SLURM_PROCID of the
    run in run_dir, from the config.yaml the submitting command wrote."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __call__(self) -> int:
        from launch.logs import rank_logging
        from launch.node import load_config
        from sync.world import detect

        cfg = load_config(self.run_dir)
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
        from launch.logs import rank_logging
        from launch.node import load_config
        from launch.ranks import make_rendezvous
        from sync.world import World

        cfg = load_config(self.run_dir)
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


# ----------------------------------------------------------------------------- inside the job
def in_slurm_step(env=None) -> bool:
    env = os.environ if env is None else env
    return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_JOB_ID" in env


def node_addr(name: str) -> str:
    """The address slurmctld reaches a node at (NodeAddr; on most clusters its host name)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "node", name], capture_output=True, text=True,
                             timeout=20).stdout
        m = re.search(r"\bNodeAddr=(\S+)", out)
        if m:
            return m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    return name


def prepare_env(cfg: Config | None = None) -> None:
    """Inside a Slurm step of several tasks (and no torchrun world): the rendezvous address is the
    first node's NodeAddr, and sync.master_port, when set, the port (else sync.world derives it
    from the job id, the same on every task)."""
    env = os.environ
    if "RANK" in env or not in_slurm_step(env) or int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1) <= 1:
        return
    if cfg is not None and cfg.sync.master_port and "MASTER_PORT" not in env:
        env["MASTER_PORT"] = str(cfg.sync.master_port)
    if "MASTER_ADDR" not in env:
        from sync.world import first_host
        env["MASTER_ADDR"] = node_addr(first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]))


def under_hydra_submitit() -> bool:
    """This process runs a Hydra job through hydra-submitit-launcher (hydra/launcher=submitit_slurm):
    the sweep directory was fixed by the submitting process, so every task has the same run dir."""
    return bool(os.environ.get("SUBMITIT_FOLDER")) and os.environ.get("SUBMITIT_EXECUTOR") == "slurm"


def run_slurm_rank(cfg: Config, world, rendezvous=None) -> int:
    """Train as one rank of a Slurm step (world None: a one-task job, the single-node fallback), or
    as an array element (`rendezvous`: its elastic rendezvous). Returns the exit code; after the
    preemption signal, requeues the job (an array: every element itself) and raises SystemExit."""
    sig = preempt_signal(cfg.launcher.signal)
    env = os.environ
    rank = world.rank if world else 0
    log.info("rank %d: Slurm job %s task %s on node %s (restart %s)", rank, env.get("SLURM_JOB_ID", "?"),
             env.get("SLURM_PROCID", "?"), env.get("SLURMD_NODENAME", "?"), env.get("SLURM_RESTART_COUNT", "0"))
    if rendezvous is not None:  # an array element: SIGTERM is its own, not a vote (SlurmArrayTask)
        from launch.ranks import run_rank
        code = run_rank(cfg, world, (signal.SIGINT, sig), rendezvous)
    elif world is not None:
        from launch.ranks import run_rank
        code = run_rank(cfg, world, (*DEFAULT_STOP_SIGNALS, sig))
    else:
        from launch.exits import run_node
        code = run_node(cfg, stop_signals=(*DEFAULT_STOP_SIGNALS, sig))
    if code != 128 + sig:
        return code
    # every rank got the signal and stopped after the same iteration; rank 0 has checkpointed.
    # One job: rank 0 requeues it; an array: each element its own job
    if (rank == 0 or rendezvous is not None) and not requeue(cfg):
        return code
    await_requeue_kill()
    # the job comes back: leave without a submitit result (it would mark the job as done)
    raise SystemExit(code)


def await_requeue_kill(timeout_s: float = 60.0) -> None:
    """Leave when the requeue kills the job's tasks (SIGTERM, then SIGKILL after KillWait), not
    before: a job whose tasks all exit on their own while it is being requeued can end FAILED."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if signal.sigtimedwait({signal.SIGTERM}, timeout_s) is None:
        log.warning("no requeue of Slurm job %s after %.0f s: leaving", os.environ.get("SLURM_JOB_ID"), timeout_s)


def requeue(cfg: Config) -> bool:
    job = os.environ.get("SLURM_JOB_ID")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if not job:
        return False
    if restarts >= cfg.launcher.max_requeues:
        log.error("not requeueing Slurm job %s: it already ran %d times (launcher.max_requeues=%d)", job,
                  restarts + 1, cfg.launcher.max_requeues)
        return False
    try:
        proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:  # e.g. a container without a Slurm client
        log.error("scontrol requeue %s failed: %s", job, exc)
        return False
    if proc.returncode != 0:
        log.error("scontrol requeue %s failed: %s", job, (proc.stderr or proc.stdout).strip())
        return False
    log.info("requeued Slurm job %s after the checkpoint (restart %d); its next run resumes from it",
             job, restarts + 1)
    return True


# ----------------------------------------------------------------------------- waiting
def job_state(job_id: str) -> tuple[str, str, str]:
    """(state, restarts, exit code) from scontrol (current), else sacct (after the job left slurmctld)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                             timeout=30).stdout
        fields = dict(re.findall(r"\b(JobState|Restarts|ExitCode|Reason)=(\S+)", out))
        if "JobState" in fields:
            return fields["JobState"], fields.get("Restarts", "0"), fields.get("ExitCode", "")
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        if out:
            state, code = out[0].split("|")
            return state.split()[0], "?", code
    except (OSError, subprocess.SubprocessError):
        pass
    return "UNKNOWN", "?", ""


def wait_submitted() -> int:
    """launcher.wait=true: wait for every job this process submitted, streaming rank 0's log;
    0 when all ended COMPLETED, 1 otherwise (130 on Ctrl-C, the jobs keep running)."""
    if not _waiting:
        return 0
    jobs = [(job, run_dir) for job, run_dir, _, _ in _waiting]
    offsets = {job: offset for job, _, offset, _ in _waiting}
    poll_s = min(p for _, _, _, p in _waiting)
    _waiting.clear()
    last = {job: None for job, _ in jobs}
    unknown = {job: 0 for job, _ in jobs}  # neither scontrol nor sacct knows the job (any more)
    final = {}
    prefix = sum(run_dir is not None for _, run_dir in jobs) > 1
    try:
        while len(final) < len(jobs):
            for job, run_dir in jobs:
                if job in final:
                    continue
                offsets[job] = _stream(run_dir, offsets[job], f"[{job}] " if prefix else "")
                state, restarts, code = job_state(job)
                if (state, restarts) != last[job]:
                    last[job] = (state, restarts)
                    again = f" (restart {restarts})" if restarts not in ("0", "?") else ""
                    print(f"Slurm job {job}: {state}{again}", flush=True)
                unknown[job] = unknown[job] + 1 if state == "UNKNOWN" else 0
                if (state not in ACTIVE_STATES and state != "UNKNOWN") or unknown[job] > 30:
                    time.sleep(0.5)  # the log's last lines
                    _stream(run_dir, offsets[job], f"[{job}] " if prefix else "")
                    final[job] = (state, code)
            if len(final) < len(jobs):
                time.sleep(poll_s)
    except KeyboardInterrupt:
        print("stopped waiting; the job(s) keep running: " + " ".join(j for j, _ in jobs if j not in final),
              file=sys.stderr, flush=True)
        return 130
    bad = {j: s for j, s in final.items() if s[0] != "COMPLETED"}
    for job, run_dir in jobs:
        state, code = final[job]
        print(f"Slurm job {job} ended {state} (exit code {code})" + (f"; run directory {run_dir}" if run_dir else ""),
              flush=True)
    return 1 if bad else 0


def _stream(run_dir: str | None, offset: int, prefix: str) -> int:
    """Print the run's train.log from `offset` (no run dir: an array's later element, nothing)."""
    if run_dir is None:
        return offset
    try:
        with open(os.path.join(run_dir, "train.log"), "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").splitlines():
        print(prefix + line, flush=True)
    return offset + end
