"""How a node runs: its sampler (SamplerConfig), its training loop (TrainConfig), its part in a
world of several nodes (SyncConfig) and the evaluation beside training (EvalConfig).

Sections of the structured config (nodes.config.schema.Config). Every default of these keys lives
here, and the comments beside and above each field are its entry in docs/configuration.md
(launch.config_docs reads them from this source).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SamplerConfig:
    # async (Sample Factory APPO) | sync (DD-PPO: every env collects `rollout` steps with the
    # current policy, then the learner learns on all of them: a batch is every env's rollout and
    # batch_size is not used) | deterministic (HTS-RL: as sync, but the envs collect the next
    # rollout while the learner learns on the last one, with the policy one update older; on a
    # CPU a run is bit-for-bit reproducible for its seed, whatever the layout of the same envs)
    mode: str = "async"
    # rollout worker processes (on which cores: pin_workers); auto: every core of this rank's share
    # left after the learner and the policy workers (nodes.sampling.placement)
    num_workers: Any = 2
    envs_per_worker: int = 8  # envs each rollout worker steps (two groups of half when double_buffered)
    double_buffered: bool = True  # two env groups per worker alternate between stepping and inference
    num_policy_workers: int = 1  # batched-inference processes
    policy_device: str = ""  # where the policy workers run: cpu | cuda | cuda:N; "" = train.device
    rollout: int = 32  # trajectory length T (also the BPTT length)
    batch_size: int = 1024  # samples per learner step; a multiple of `rollout`
    # true: rollout worker i runs on core (pin_offset + i) % ncores of its cores alone; false: the
    # rollout workers may run on any of their cores (the rank's share, less the cores a GPU rank
    # keeps for its learner and policy workers); auto: true where the learner and policy workers
    # have cores of their own, false where they share the workers' cores (a CPU node): pinned
    # there, a worker waited for its one core while the other idled (nodes.sampling.placement)
    pin_workers: Any = "auto"
    pin_offset: int = 0  # start pinning at this core of the rank's share (ranks of one host get disjoint shares)
    # trajectory buffers in shared memory (async only; sync and deterministic have 1 and 2 per env);
    # 0 = one per env + one batch, the fewest that cannot deadlock (more only add policy lag)
    num_slots: int = 0


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
    # false with train.device=cuda, whose iteration does not (bound by kernel launches: a small
    # share takes about as long as the whole batch), so the split would leave N GPU nodes at about
    # one node's speed (docs/multi-node.md#batch-size-and-learning-rate; the figures:
    # docs/benchmarks.md#figures-behind-the-codes-choices)
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
