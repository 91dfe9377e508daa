"""The structured config: the one home of every default, and what the sampler's layout derives from it.

The dataclasses below are registered in Hydra's ConfigStore as `schema` (launch.cli.app), the first
entry of conf/config.yaml's defaults list. Their defaults are what `python -m launch.train` runs
with: VizDoom basic, the simplified model, APPO, the async sampler on this machine. The option
files under conf/<group>/ hold only what differs from these defaults (tests/test_config_defaults.py
checks that composing conf/ gives exactly `Config()` and that no option file repeats a default).

The functions at the end (in_rounds, slots_per_batch, num_slots) derive the sampler's buffers and
batches from a SamplerConfig, for the processes that build them. Which values are allowed is
nodes.config.validate's job (`validate(cfg)`, run by the launcher before any worker process starts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvConfig:
    name: str = "doom_basic"  # the conf/env/ option that selected this env (run directories are named by it)
    family: str = "doom"  # doom | atari | dmlab | gym
    # doom: a scenario .cfg bundled with vizdoom; atari: ALE/<Game>-v5; dmlab: a level; gym: a gymnasium id
    id: str = "basic.cfg"
    # python: each env a Python object stepped by its rollout worker | envpool: each env group of a
    # rollout worker one EnvPool batch stepped in C++ (Atari and EnvPool's gym tasks: MuJoCo,
    # classic control; nodes/envs/envpool_env.py); evaluation and enjoy step the python backend
    backend: str = "python"
    frameskip: int = 4  # engine frames per agent step (env_frames count these)
    width: int = 128  # observation size fed to the model (VizDoom renders 160x120 and is resized)
    height: int = 72  # the model's input height
    reward_scale: float = 0.01  # training reward = game reward x this; logged rewards stay unscaled
    episode_timeout: int = 0  # VizDoom tics; 0 keeps the scenario's own
    # pixel preprocessing (Atari: 84x84 grayscale, 4 stacked frames):
    grayscale: bool = False  # one luminance channel instead of RGB
    frame_stack: int = 1  # the last this many frames stacked as the observation
    # Atari-style episode handling:
    noop_max: int = 0  # up to this many no-ops after reset (random start states)
    episodic_life: bool = False  # a lost life ends the trajectory for training; the score runs on
    clip_rewards: bool = False  # train on sign(reward); the logged score stays the game's
    # Atari: press FIRE for one agent step after a game reset and after a lost life, in games whose
    # action set has it (Breakout serves the ball on FIRE), as Sample Factory's and CleanRL's
    # wrappers do; these frames are not counted in env_frames. The python backend only
    fire_reset: bool = False
    # DeepMind Lab:
    level_cache_dir: str = ""  # generated level layouts are cached here ("" = ~/.cache/distrl/dmlab)
    # VizDoom:
    actions: str = "single"  # single: no-op + one button per action | heads: one discrete head per button group
    measurements: bool = True  # game variables (health, ammo, ...) beside the pixels (used by model=full)
    shaping: dict[str, float] = field(default_factory=dict)  # game variable -> training reward per unit of change
    pickups: dict[str, float] = field(default_factory=dict)  # the same per unit of increase only (health, armor, ...)
    # a fresh engine after this many episodes (0: never): VizDoom's engine keeps about 0.3 kB per
    # new episode for good (measured on 1.3.2, basic.cfg), about 10 MB an hour per env at doom_basic's pace
    restart_episodes: int = 5000
    buttons: list[str] = field(default_factory=list)  # replaces the scenario's buttons ([]: its .cfg's)
    doom_map: str = ""  # the map to play ("": the scenario's own, MAP01)
    # the game's reward per tic alive and for dying (VizDoom's living_reward, death_penalty: null
    # keeps the scenario .cfg's); part of the game reward, so of what is logged as the score
    living_reward: Any = None
    death_penalty: Any = None  # subtracted from the game reward at death (VizDoom's death_penalty)
    # the status bar (health, ammo) drawn into the frames the model sees: true | false | null (the
    # .cfg's own; the bundled ones hide it, Sample Factory's .cfg variants of basic, defend_* and
    # deadly_corridor show it)
    render_hud: Any = None
    # A match against the engine's scripted bots (nodes/envs/doom_match.py): the env hosts a
    # deathmatch of itself and `bots` bots; an episode is one match of match_minutes, a death
    # respawns, and the score (the logged episode reward) is the agent's frags.
    bots: int = 0  # 0: the single-player game
    bot_skill: str = "mixed"  # easy | medium | hard | mixed: which of bots.cfg's bots join (by their skill)
    match_minutes: float = 4.0  # the length of one match (one episode)
    max_players: int = 0  # players the map takes (0: its deathmatch starts, at most the engine's 16)
    # A match between learning agents (nodes/envs/doom_agents.py): `agents` > 1 players, one engine
    # each in a subprocess, stepped in lock-step; each agent is an env slot of its own, so a match
    # fills `agents` consecutive slots of one env group. A match whose engines die or stop answering
    # for match_timeout_s is restarted (and counted).
    agents: int = 1
    match_timeout_s: float = 20.0  # a match whose engines do not answer this long is restarted


@dataclass
class SamplerConfig:
    # async (Sample Factory APPO) | sync (DD-PPO: every env collects `rollout` steps with the
    # current policy, then the learner learns on all of them: a batch is every env's rollout and
    # batch_size is not used) | deterministic (HTS-RL: as sync, but the envs collect the next
    # rollout while the learner learns on the last one, with the policy one update older; on a
    # CPU a run is bit-for-bit reproducible for its seed, whatever the layout of the same envs)
    mode: str = "async"
    # rollout worker processes, each pinned to a core; auto: every core of this rank's share left
    # after the learner and the policy workers (nodes.sampling.placement)
    num_workers: Any = 2
    envs_per_worker: int = 8  # envs each rollout worker steps (two groups of half when double_buffered)
    double_buffered: bool = True  # two env groups per worker alternate between stepping and inference
    num_policy_workers: int = 1  # batched-inference processes
    policy_device: str = ""  # where the policy workers run: cpu | cuda | cuda:N; "" = train.device
    rollout: int = 32  # trajectory length T (also the BPTT length)
    batch_size: int = 1024  # samples per learner step; a multiple of `rollout`
    pin_workers: bool = True  # pin rollout worker i to core (pin_offset + i) % ncores
    pin_offset: int = 0  # start pinning at this core of the rank's share (ranks of one host get disjoint shares)
    # trajectory buffers in shared memory (async only; sync and deterministic have 1 and 2 per env);
    # 0 = one per env + one batch, the fewest that cannot deadlock (more only add policy lag)
    num_slots: int = 0


@dataclass
class ModelConfig:
    name: str = "simplified"  # the conf/model/ option
    # auto: conv for image observations, mlp for vectors | conv (Sample Factory's simplified stack,
    # 32-64-128, ELU) | nature (DQN's 32-64-64 3x3/1, ReLU: Sample Factory 2's Atari encoder) | impala | mlp
    encoder: str = "auto"
    fc_size: int = 512  # width of the fully connected layers after the encoder
    # fully connected layers of fc_size after the conv or IMPALA encoder (Sample Factory 2's VizDoom
    # encoder has two, encoder_mlp_layers=[512, 512]; the mlp encoder always has its own two)
    fc_layers: int = 1
    core: str = "gru"  # gru | lstm | none
    hidden_size: int = 512  # the recurrent core's state size
    measurements: bool = False  # feed the env's measurements (game variables) through an MLP


@dataclass
class AlgoConfig:
    name: str = "appo"  # asynchronous PPO: PPO clipping + GAE, or V-trace targets (algo.vtrace)
    lr: float = 1e-4  # Adam's learning rate
    # constant | linear: lr x (1 - env frames / train.max_env_frames), to 0 at the run's end (Sample
    # Factory's linear_decay, of its MuJoCo and Atari examples); PBT's lr is the one scaled
    lr_schedule: str = "constant"
    # none | sqrt | linear: the lr x (nodes in the world)^(0 | 1/2 | 1), followed through elastic
    # changes. For sync.global_batch=false, where every update averages N nodes' batches and N
    # nodes take N times fewer steps per frame (docs/several-nodes.md#batch-size-and-learning-rate)
    lr_scaling: str = "none"
    gamma: float = 0.99  # discount factor
    # V-trace targets (the Sample Factory paper's APPO); off: GAE (gae_lambda) on the behaviour
    # values, as Sample Factory 2 runs VizDoom. GAE by default: with the policy lag near 1.5 and
    # PPO's clipping it learns more per frame than V-trace on defend_the_center, as much on
    # doom_basic and defend_the_line (docs/benchmarks.md; docs/changelog.md). A node with a much
    # larger policy lag may want V-trace
    vtrace: bool = False
    vtrace_rho: float = 1.0  # V-trace's importance-weight clip on the targets (rho bar)
    vtrace_c: float = 1.0  # V-trace's trace-cutting clip (c bar)
    gae_lambda: float = 0.95  # GAE's lambda (vtrace=false)
    ppo_clip: bool = True  # PPO clipped surrogate; off: plain policy gradient
    clip_ratio: float = 0.1  # PPO's clipping: the policy ratio is kept within 1 +- this
    value_loss_coeff: float = 0.5  # weight of the value loss against the policy loss
    # The next four are Sample Factory's VizDoom settings: on doom_basic, defend_the_center and
    # defend_the_line they learn more per frame than an entropy bonus of 0.003 without the other three.
    # > 0: PPO's clipped value loss, values kept within this of the behaviour value (in the
    # normalised units when normalize_returns is on); 0: plain squared error
    value_clip: float = 0.2
    # entropy: the entropy bonus (entropy_coeff) | symmetric_kl: a penalty of entropy_coeff x half the
    # symmetric KL divergence to the uniform policy, its batch mean capped at 30 (Sample Factory 2's
    # exploration_loss=symmetric_kl, nodes.learning.losses)
    exploration_loss: str = "symmetric_kl"
    entropy_coeff: float = 0.001  # the exploration loss's coefficient, whichever it is
    # > 0: a penalty of this x the KL divergence from the behaviour policy to the current one
    # (estimated from the batch's actions: nodes.learning.losses.kl_to_behaviour), as MuJoCo PPO setups add
    # (Sample Factory's kl_loss_coeff, 0.1 in its MuJoCo example); logged as train/kl whatever it is
    kl_coeff: float = 0.0
    max_grad_norm: float = 4.0  # 0 disables clipping
    adam_eps: float = 1e-6  # Adam's epsilon
    adam_beta1: float = 0.9  # Adam's beta1
    adam_beta2: float = 0.999  # Adam's beta2
    # Passes over each batch (epochs) and the optimizer steps of each pass (minibatches, the batch's
    # trajectories split at random into this many): PPO's usual 4-10 x 4-32 on MuJoCo, Sample
    # Factory's MuJoCo example 2 x 4. 1 x 1 (the default, Sample Factory's VizDoom setting): one step
    # per batch. Every step is an all-reduce across nodes and a policy version (the policy lag
    # counts optimizer steps, as in Sample Factory); a batch's observation and return statistics
    # are folded into the running norms once, in its first epoch
    epochs: int = 1  # passes over each batch
    minibatches: int = 1  # optimizer steps of each pass, each on this share of the batch's trajectories
    normalize_advantages: bool = True  # per node (per minibatch), as in DD-PPO
    # the critic predicts value targets divided by their running std (after their running mean is
    # taken off; moments over all nodes), and values are scaled back for V-trace/GAE; changes
    # what the value loss sees, not the policy loss
    normalize_returns: bool = True
    # an episode cut by a time limit (the env says `truncated`: gymnasium's envs, MuJoCo's 1,000
    # steps) is not the task's end: its last reward gets gamma x the behaviour value of the state it
    # was cut at (Sample Factory's value_bootstrap, the value there standing for the next state's).
    # Acts only where an env reports a time limit; VizDoom's and Atari's limits are the game's rules
    value_bootstrap: bool = True


@dataclass
class TrainConfig:
    max_env_frames: int = 10_000_000  # over all launches of the run (frames = agent steps x frameskip); 0 = no limit
    max_seconds: float = 0.0  # this launch only; 0 = no limit
    checkpoint_every_s: float = 300.0  # seconds between checkpoints (and one at the end)
    keep_checkpoints: int = 2  # the newest this many checkpoints are kept
    status_every_s: float = 5.0  # seconds between status lines
    # torch threads in the learner; 0 = on CPU the rank's cores its workers leave (at least 1; all of
    # them with sampler.mode=sync, where the workers wait while it learns), 2 on CUDA
    learner_threads: int = 0
    # cpu | cuda (one GPU per rank, chosen where the rank starts: nodes.sampling.placement) | cuda:N
    device: str = "cpu"
    # auto | fp32 | bf16: bf16 is autocast of the forward passes, the same in the policy workers and
    # the learner (logits, log-softmax and values stay fp32); auto: bf16 where the rank's devices
    # have bf16 units (nodes.sampling.placement), else fp32
    precision: str = "auto"


@dataclass
class SyncConfig:
    """Across nodes (nodes > 1); sync/ reads these."""

    timeout_s: float = 300.0  # a collective waiting longer than this is an error (a dead peer)
    # a node that is behind trains on what it has once the others are ready (sampler.mode=sync:
    # DD-PPO's preemption, its rollouts end early)
    straggler: bool = True
    min_batch_frac: float = 0.25  # ... but at least this fraction of a batch (sync: of each rollout)
    ready_frac: float = 0.5  # "the others are ready": this fraction of all ranks has a full batch
    check_every: int = 50  # iterations between parameter-checksum comparisons
    # iterations between gathers of every rank's stats row (samples, rewards, sync time: the
    # status line, TensorBoard's episode and per-node scalars, the summary), and after the last
    # one; the stop votes ride in the gradient all-reduce instead, so every rank still stops after
    # the same iteration. An all-gather costs the ring's latency once per rank: at 256 nodes more
    # than a GPU step. One node takes its own row every iteration.
    stats_every: int = 10
    backend: str = "auto"  # auto: nccl when train.device is cuda, else gloo
    # the gradient all-reduce's dtype on the wire: fp32 | bf16 (half the bytes, for slow links: the
    # gradient x samples is summed in bfloat16, about 3 significant digits; the sample count, the
    # running norms' moments and the flags stay fp32, in a second, small all-reduce)
    grad_dtype: str = "fp32"
    # true: sampler.batch_size is the whole world's batch, each of the launch's `nodes` nodes
    # learning on its share (whole rollouts, at least one; the async sampler's batch: rounds are one
    # round of every env), so N nodes take about as many steps per frame as one node, at N times
    # the all-reduces per frame. false: each node's batch is batch_size, and N nodes need more
    # frames to a score. auto: true on CPU nodes, whose learner's iteration shrinks with its batch,
    # false with train.device=cuda, whose iteration does not (bound by kernel launches: 43 ms on
    # 128 samples, ~45 on 1,024 on an H100), so the split would leave N GPU nodes at about one
    # node's speed (docs/several-nodes.md#batch-size-and-learning-rate)
    global_batch: Any = "auto"
    # 0: a free port (the local spawner's; in a Slurm step, the one rank 0 publishes in the run dir)
    master_port: int = 0
    # Elastic membership (sync/rendezvous.py): a lost node costs the others one re-formed world,
    # not the run, and nodes started later join (`python -m launch.node RUN_DIR`). On by default:
    # every rank holds the same state after every iteration, so nothing is reloaded, and a
    # researcher whose node fails mid-run wants the rest to go on. false: a lost node ends the run
    # (every survivor exits naming it; a relaunch resumes from the last checkpoint).
    elastic: bool = True
    min_nodes: int = 1  # fewer left than this: the run stops with a checkpoint (exit 75)
    max_nodes: int = 0  # nodes waiting beyond this many are turned away (0: no bound)
    # after a loss, how long a survivor waits for the others it did not see lost before the new
    # world forms without them (a late one joins the next world: a second change, not an error).
    # Only a late survivor makes anyone wait: a round closes as soon as all expected are there
    settle_s: float = 10.0


@dataclass
class PopulationConfig:
    """Several policies in one run (nodes/population/roster.py): each member has its own learner,
    optimizer, hyper-parameters and, with several nodes, its own gradient all-reduce group; they
    share the node's rollout and policy workers (requests are routed to the env's member)."""

    size: int = 1  # the members (policies); 1: one policy
    # single-agent envs: fixed (a rank's envs in `size` contiguous blocks, block p always played by
    # member p) | episode (each episode draws a member uniformly). The seats of a match between
    # agents always draw at each match (self-play)
    assign: str = "fixed"
    # Self-play (matches between agents): frozen past copies of the members kept as extra opponents
    # (0: none). Every snapshot_every_frames env frames per member the next member in turn is copied
    # into the oldest of the `snapshots` slots; once one exists, each seat of a match but the first
    # plays a random snapshot with probability snapshot_prob. Nobody learns from a snapshot's seat.
    snapshots: int = 0
    snapshot_every_frames: int = 1_000_000  # env frames per member between snapshots
    snapshot_prob: float = 0.5  # probability that a seat (not the first) plays a snapshot


@dataclass
class PbtConfig:
    """Population-based training (nodes/population/pbt.py), on when population.size > 1 and period_frames > 0.
    The defaults are Sample Factory's recipe: every period_frames env frames per member, the
    members in the bottom replace_frac (by objective) copy the weights and hyper-parameters of a
    random member of the top replace_frac, if it is better by replace_gap (relative to its own
    objective's magnitude) and by replace_gap_abs, then each of their hyper-parameters is
    multiplied or divided by `perturb` with probability mutation_rate (at least one is)."""

    period_frames: int = 5_000_000  # env frames per member (the run's frames / population.size); 0: no PBT
    start_frames: int = 0  # no PBT step before this many frames per member
    # reward: mean recent episode reward | true_objective: their mean true objective (the env's own
    # unshaped measure; the reward where it has none) | win: recent match win rate (VizDoom matches)
    objective: str = "reward"
    replace_frac: float = 0.3  # the bottom (and top) fraction of members in a PBT step
    replace_gap: float = 0.1  # a top member must be better by this, relative to the objective's magnitude
    replace_gap_abs: float = 1e-6  # ... and by this much in absolute terms
    mutation_rate: float = 0.15  # probability that each hyper-parameter of a replaced member mutates
    perturb: float = 1.2  # a mutation multiplies or divides by this
    # what mutates: the learning rate, the exploration loss's coefficient and every env.shaping /
    # env.pickups weight (the env reports each term's change; the worker weighs it by the member's)
    mutate: list[str] = field(default_factory=lambda: ["lr", "entropy_coeff", "shaping"])


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
    # launch.scaling (the cluster on paper): all-reduces are timed in gloo groups of these many local ranks
    scaling_ranks: list[int] = field(default_factory=lambda: [2, 4, 8])
    scaling_repeats: int = 10  # launch.scaling: timed all-reduces per size and rank count (the median)
    scaling_steps: int = 5  # launch.scaling: timed learner steps on this CPU (the median)
    # launch.scaling: the same all-reduces again on emulated hosts (launch.spawn.hosts, as root), one rank
    # per host, every link shaped to each of these rates (100mbit, 1gbit, ...), against the model
    scaling_links: list[str] = field(default_factory=list)
    # launch.scaling: the learner's iteration on a GPU, the same at every node's share of the batch.
    # Measured on the one GPU this has run on (an H100, docs/gpu.md): the default layout's step
    # (doom_basic, model=simplified, 32 x 32 samples: 60 GFLOP of matmuls and convolutions, forward
    # and backward) took about 45 ms, and 43 ms on a 128-sample share: bound by kernel launches (its
    # 33-step GRU unroll is a chain of small sequential kernels each way), not by arithmetic (1.3
    # TFLOP/s achieved). Set it for another model or GPU
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
class EvalConfig:
    """Evaluation during training (nodes/evaluation/evaluator.py): the writer rank's evaluator process plays the
    current policy on envs of its own while training goes on."""

    # a round every this many env frames; 0: off. On by default: a researcher wants the policy's score
    # on envs it did not train on, and the best weights kept, without asking; a round costs a CPU
    # copy of the weights and one core while it plays (benchmarks: eval_cost.sh), and the evaluator
    # process starts at the first round, so runs shorter than this never pay for it.
    every_frames: int = 1_000_000
    episodes: int = 10  # per round (and per population member)
    greedy: bool = False  # argmax per head instead of sampling (sampling is what was trained)


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


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    pbt: PbtConfig = field(default_factory=PbtConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # where the writer rank sends scalars: tensorboard (run_dir/tb) and/or wandb (see WandbConfig)
    logger: list[str] = field(default_factory=lambda: ["tensorboard"])
    wandb: WandbConfig = field(default_factory=WandbConfig)
    seed: int = 0  # env, sampling and initialisation seeds all derive from it (nodes.run.seeds)
    nodes: int = 1  # >1: one full Sample Factory node per process or machine (sync/)
    run_dir: str | None = None  # filled in by the launcher (Hydra's output dir)


def in_rounds(s: Any) -> bool:
    """Whether the envs collect in rounds of one rollout each, a batch being one round of every env
    (sync, deterministic), rather than slots being batched as they finish (async)."""
    return s.mode in ("sync", "deterministic")


def slots_per_batch(s: Any) -> int:
    """Trajectories per learner batch: batch_size / rollout, or one per env in rounds."""
    assert s.num_workers != "auto", "num_workers=auto is resolved where the rank starts (nodes.sampling.placement)"
    return s.num_workers * s.envs_per_worker if in_rounds(s) else s.batch_size // s.rollout


def splits_batch(global_batch: Any, device: str) -> bool:
    """sync.global_batch resolved for a node computing on `device` (train.device): auto splits the
    world's batch on CPUs and not on GPUs."""
    return not device.startswith("cuda") if global_batch == "auto" else bool(global_batch)


def node_batch_size(s: Any, nodes: int, global_batch: bool) -> int:
    """A node's learner batch: sampler.batch_size, or with sync.global_batch its share of it over
    the launch's `nodes`, in whole rollouts and at least one (beyond batch_size / rollout nodes the
    world's batch grows: one rollout per node). Rounds (sync, deterministic) batch one round of
    every env: no share."""
    if not global_batch or nodes <= 1 or in_rounds(s):
        return s.batch_size
    return max(1, s.batch_size // nodes // s.rollout) * s.rollout


def num_slots(s: Any, members: int = 1) -> int:
    """Trajectory buffers: async, one per env (filling) plus one learner batch, the fewest that
    cannot deadlock (an env that waits for a free slot holds its worker's other envs' slots); in
    sync mode one per env (an env waits for the learner's update before it collects again); in
    deterministic mode two per env (one round filling while the learner learns on the other).

    When the learner is the bottleneck, every extra slot only adds policy lag: a batch's slots
    return when the learner takes it (nodes.learning.batcher), so with the default the envs collect the
    next batch during the step, half of it ahead of time (lag 1.5 on doom_basic, 2 x 8 envs;
    2.0 with one more per env, 3.0 when slots returned at the batcher's copy). A population of
    `members` (async only) gets one batch per member (nodes.learning.batcher.wait_for_batches).
    """
    if s.mode == "sync":
        return s.num_workers * s.envs_per_worker
    if s.mode == "deterministic":
        return 2 * s.num_workers * s.envs_per_worker
    if s.num_slots:
        return s.num_slots
    return s.num_workers * s.envs_per_worker + members * slots_per_batch(s)
