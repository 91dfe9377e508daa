"""What runs around training rather than in it: the launchers (LauncherConfig), the benchmarks
and soak tests (BenchConfig) and the Weights & Biases output (WandbConfig).

Sections of the structured config (nodes.config.schema.Config). Every default of these keys lives
here, and the comments beside and above each field are its entry in docs/configuration.md
(launch.config_docs reads them from this source).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BenchConfig:
    seconds: float = 30.0  # measured seconds per phase (after warmup_s)
    warmup_s: float = 10.0  # seconds before each phase's measurement starts
    # training schemes to compare on this layout, one node: bench.modes=[async,sync,deterministic]
    # measures only the train phase of each, in this order, and prints each one's ratio to the first
    modes: list[str] = field(default_factory=list)
    # > 0: the soak test instead: a real training run for warmup_s + soak_s with the node's memory
    # sampled every 10 s, and its growth after the warm-up (bench.soak_s=1800: 30 minutes)
    soak_s: float = 0.0
    # launch.chaos (the chaos soak, nodes=3 launcher=hosts): faults are injected for chaos_s seconds
    # from the world's first formation (then it trains on to train.max_env_frames)
    chaos_s: float = 1800.0
    chaos_every_s: float = 120.0  # launch.chaos: mean gap between faults (each uniform in 0.5x to 1.5x of it)
    # launch.chaos: these kinds in this order (e.g. [kill,join,freeze,kill_store]), then no more faults;
    # empty: every kind in turn from a shuffled bag, for the whole window
    chaos_faults: list[str] = field(default_factory=list)
    # launch.scaling (the cluster on paper): all-reduces are timed in gloo groups of these many local ranks
    scaling_ranks: list[int] = field(default_factory=lambda: [2, 4, 8])
    scaling_repeats: int = 10  # launch.scaling: timed all-reduces per size and rank count (the median)
    scaling_steps: int = 5  # launch.scaling: timed learner steps on this CPU (the median)
    # launch.scaling: the same all-reduces again on emulated hosts (launch.spawn.hosts, as root), one rank
    # per host, every link shaped to each of these rates (100mbit, 1gbit, ...), against the model
    scaling_links: list[str] = field(default_factory=list)
    # launch.scaling: the learner's iteration on a GPU, the same at every node's share of the batch.
    # The default is the default layout's step (doom_basic, model=simplified, 32 x 32 samples) as
    # measured on the one kind of GPU this has run on (docs/gpu.md; the figures:
    # docs/benchmarks.md#figures-behind-the-codes-choices): bound by kernel launches (its 33-step
    # GRU unroll is a chain of small sequential kernels each way), not by arithmetic, so a smaller
    # share takes about as long. Set it for another model or GPU
    gpu_iteration_s: float = 0.045


@dataclass
class LauncherConfig:
    """launcher=local runs on this machine; launcher=slurm (launch/slurm/, through submitit) submits
    ONE job of nodes/tasks_per_node Slurm nodes, one rank per task, each running the resolved config
    the submitting command wrote to <run_dir>/config.yaml; submitit's files go to <run_dir>/slurm/.
    Values are checked by launch.slurm.check before anything is submitted."""

    name: str = "local"  # local | hosts | slurm (conf/launcher/)
    # hosts: each node's emulated host's link, both directions (tc units: 100mbit, 1gbit, 10gbit)
    link: str = "1gbit"
    partition: str = ""  # slurm: "" = the cluster's default partition
    wait: bool = False  # slurm: wait for the job, stream rank 0's log, exit 0 only when it ends COMPLETED
    tasks_per_node: int = 1  # ranks per Slurm node; `nodes` (ranks) must be a multiple of it
    time_min: int = 60  # time limit of one run of the job, minutes (a requeued job gets a new one)
    # 0 = derived (launch.slurm.resources): with train.device=cuda one GPU per task, a core per
    # process of the layout and memory for it; on CPU, Slurm's defaults
    gpus_per_node: int = 0
    cpus_per_task: int = 0  # needed with sampler.num_workers=auto
    mem_gb: int = 0  # memory per node
    account: str = ""  # slurm: --account
    qos: str = ""  # slurm: --qos
    constraint: str = ""  # slurm: --constraint
    job_name: str = "distrl"  # slurm: --job-name
    # extra sbatch options: launcher.sbatch='[--exclusive,"--mail-type=END"]'
    sbatch: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)  # shell lines before srun: launcher.setup=['module load cuda']
    # Preemption and time limits: Slurm sends `signal` signal_delay_s before the time limit (and a
    # preempting scheduler may send it too); every rank stops after the same iteration, rank 0
    # checkpoints and requeues the job, the next run resumes. USR2, not USR1: NCCL may use SIGUSR1.
    signal: str = "USR2"
    signal_delay_s: int = 120  # seconds before the time limit that Slurm sends `signal`
    max_requeues: int = 20  # requeue on the signal at most this many times (SLURM_RESTART_COUNT)
    poll_s: float = 2.0  # wait=true: seconds between job-state queries
    # true: a job array of `nodes` one-node jobs instead of one job (needs sync.elastic): an element
    # that fails, is cancelled or is requeued leaves the run and the others go on; a requeued
    # element rejoins when it runs again (launch/slurm/tasks.py SlurmArrayTask)
    array: bool = False



@dataclass
class WandbConfig:
    """Weights & Biases (logger=[tensorboard,wandb]): the writer rank logs the scalars TensorBoard gets
    (x axis: env_frames), the resolved config and summary.json to one W&B run per run directory; a
    relaunch of the run resumes that W&B run (its id is kept in run_dir/wandb/run_id)."""

    project: str = "distrl"  # the W&B project
    entity: str = ""  # "": the API key's default entity
    # online | offline (written under run_dir/wandb/; `wandb sync` it later) | disabled | "" (W&B's
    # own choice: the WANDB_MODE environment variable, else online)
    mode: str = ""
    group: str = ""  # "": in a Hydra multirun the sweep's directory name (its runs side by side), else none
    tags: list[str] = field(default_factory=list)  # the W&B run's tags
