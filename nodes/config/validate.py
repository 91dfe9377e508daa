"""The semantic checks on a composed config (nodes.config.schema.Config): `validate(cfg)`.

It runs in the launching process (launch.cli.app, launch.bench), before any worker process starts, and
each failure is one line (`ConfigError`, nodes.errors.need) naming the key and the value it got.
What a key may hold is checked here; its default lives in the dataclasses of nodes.config.schema and
its sections. Whether an env can be created here is checked separately (nodes.envs.check_env_config),
by the launcher, after `validate`; whether CUDA is there, where each rank starts
(nodes.sampling.placement).

`need_envs_for` and `need_minibatches` also run where a rank starts: with sampler.num_workers=auto
the number of envs is known only there (nodes.node).
"""
from __future__ import annotations

import re
from typing import Any

from nodes.config.layout import in_rounds, node_batch_size, splits_batch
from nodes.errors import ConfigError, need, one_line

SAMPLER_MODES = ("async", "sync", "deterministic")
ASSIGNMENTS = ("fixed", "episode")
PBT_OBJECTIVES = ("reward", "true_objective", "win")
PBT_MUTABLE = ("lr", "entropy_coeff", "shaping")
EXPLORATION_LOSSES = ("entropy", "symmetric_kl")
LR_SCALING = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}  # algo.lr_scaling: the lr x nodes ** exponent
LOGGERS = ("tensorboard", "wandb")
WANDB_MODES = ("", "online", "offline", "disabled")


def validate(cfg: Any) -> None:
    """Semantic checks on a composed config; raises ConfigError with one line naming the key.

    The sections are checked in this order, and each section's keys in the order of its step, so a
    config with several bad values is always refused naming the same one first."""
    need(cfg.nodes >= 1, f"nodes must be >= 1, got {cfg.nodes}")
    need(cfg.seed >= 0, f"seed must be >= 0 (every random stream derives from it), got {cfg.seed}")
    per_batch = _validate_sampler(cfg)
    _validate_algo(cfg, per_batch)
    _validate_train(cfg)
    _validate_env(cfg)
    _validate_model(cfg)
    _validate_bench(cfg)
    _validate_sync(cfg)
    _validate_population(cfg)
    _validate_loggers(cfg)
    _validate_eval(cfg)
    # Whether CUDA is there is checked where each rank starts (nodes.sampling.placement), not here: this
    # runs on the submitting host too, and a login node without a GPU may submit a GPU job.


def _validate_sampler(cfg: Any) -> int:
    """The sampler's layout; returns the trajectories in a batch (batch_size / rollout)."""
    s, e, y = cfg.sampler, cfg.env, cfg.sync
    need(s.mode in SAMPLER_MODES, f"sampler.mode must be one of {', '.join(SAMPLER_MODES)}, got '{s.mode}'")
    auto_workers = s.num_workers == "auto"
    need(auto_workers or (isinstance(s.num_workers, int) and not isinstance(s.num_workers, bool)
                          and s.num_workers >= 1),
         f"sampler.num_workers must be an integer >= 1 or auto, got {s.num_workers!r}")
    need(s.pin_workers == "auto" or isinstance(s.pin_workers, bool),
         f"sampler.pin_workers must be auto, true or false, got {s.pin_workers!r}")
    need(s.envs_per_worker >= 1, f"sampler.envs_per_worker must be >= 1, got {s.envs_per_worker}")
    need(not s.double_buffered or s.envs_per_worker % 2 == 0,
         "sampler.envs_per_worker must be even with sampler.double_buffered=true (two equal groups), "
         f"got {s.envs_per_worker}")
    per_group = s.envs_per_worker // (2 if s.double_buffered else 1)
    need(e.agents <= 1 or per_group % e.agents == 0,
         f"sampler.envs_per_worker={s.envs_per_worker}: with env.agents={e.agents} every env group must hold whole "
         f"matches ({per_group} envs per group{' when double-buffered' if s.double_buffered else ''}, "
         f"not a multiple of {e.agents})")
    need(s.num_policy_workers >= 1, f"sampler.num_policy_workers must be >= 1, got {s.num_policy_workers}")
    need(s.rollout >= 1, f"sampler.rollout must be >= 1, got {s.rollout}")
    need(s.batch_size >= s.rollout and s.batch_size % s.rollout == 0,
         f"sampler.batch_size ({s.batch_size}) must be a positive multiple of sampler.rollout ({s.rollout})")
    envs, per_batch = (0 if auto_workers else s.num_workers) * s.envs_per_worker, s.batch_size // max(s.rollout, 1)
    members = cfg.population.size
    need(s.num_slots == 0 or s.num_slots >= envs + members * per_batch,
         f"sampler.num_slots ({s.num_slots}) must be 0 (auto) or at least envs ({envs}) + batch_size/rollout "
         f"({per_batch}){f' x population.size ({members})' if members > 1 else ''}, else sampling deadlocks")
    need(s.mode != "deterministic" or cfg.nodes == 1 or not y.straggler,
         "sampler.mode=deterministic with several nodes needs sync.straggler=false (cutting a straggler's "
         "rollout short depends on timing, so it is not reproducible)")
    return per_batch


def _validate_algo(cfg: Any, per_batch: int) -> None:
    a = cfg.algo
    need(a.lr > 0, f"algo.lr must be > 0, got {a.lr}")
    need(a.lr_schedule in ("constant", "linear"), f"algo.lr_schedule must be constant or linear, got '{a.lr_schedule}'")
    need(a.lr_scaling in LR_SCALING, f"algo.lr_scaling must be one of {', '.join(LR_SCALING)}, got '{a.lr_scaling}'")
    need(a.lr_schedule != "linear" or cfg.train.max_env_frames > 0,
         "algo.lr_schedule=linear decays the lr to 0 at train.max_env_frames: set it (> 0)")
    need(0 < a.gamma <= 1, f"algo.gamma must be in (0, 1], got {a.gamma}")
    need(a.clip_ratio > 0, f"algo.clip_ratio must be > 0, got {a.clip_ratio}")
    need(a.max_grad_norm >= 0, f"algo.max_grad_norm must be >= 0, got {a.max_grad_norm}")
    need(a.value_clip >= 0, f"algo.value_clip must be >= 0 (0: off), got {a.value_clip}")
    need(a.exploration_loss in EXPLORATION_LOSSES,
         f"algo.exploration_loss must be one of {', '.join(EXPLORATION_LOSSES)}, got '{a.exploration_loss}'")
    _validate_passes(a, *node_trajectories(cfg, per_batch))


def _validate_train(cfg: Any) -> None:
    """The training loop's keys, and the devices the learner and the policy workers run on."""
    t, s = cfg.train, cfg.sampler
    need(t.max_env_frames >= 0, f"train.max_env_frames must be >= 0, got {t.max_env_frames}")
    need(t.max_seconds >= 0, f"train.max_seconds must be >= 0, got {t.max_seconds}")
    need(t.checkpoint_every_s > 0, f"train.checkpoint_every_s must be > 0, got {t.checkpoint_every_s}")
    need(t.keep_checkpoints >= 1, f"train.keep_checkpoints must be >= 1, got {t.keep_checkpoints}")
    for key, dev in (("train.device", t.device), ("sampler.policy_device", s.policy_device or "cpu")):
        need(re.fullmatch(r"cpu|cuda(:\d+)?", dev) is not None, f"{key} must be cpu, cuda or cuda:N, got '{dev}'")
    need(t.precision in ("auto", "fp32", "bf16"), f"train.precision must be auto, fp32 or bf16, got '{t.precision}'")


def _validate_env(cfg: Any) -> None:
    e = cfg.env
    need(e.frameskip >= 1, f"env.frameskip must be >= 1, got {e.frameskip}")
    need(e.agents >= 1, f"env.agents must be >= 1, got {e.agents}")
    need(e.agents == 1 or e.family == "doom",
         f"env.agents={e.agents}: matches between agents are VizDoom matches; env family '{e.family}' has none")
    need(e.backend in ("python", "envpool"), f"env.backend must be python or envpool, got '{e.backend}'")
    need(e.frame_stack >= 1, f"env.frame_stack must be >= 1, got {e.frame_stack}")
    need(e.noop_max >= 0, f"env.noop_max must be >= 0, got {e.noop_max}")
    need(e.channels in ("auto", "first", "last"), f"env.channels must be auto, first or last, got '{e.channels}'")
    gym_only = [k for k, v in (("env.make", e.make), ("env.kwargs", e.kwargs), ("env.drop_keys", e.drop_keys),
                               ("env.channels", e.channels != "auto")) if v]
    need(e.family == "gym" or not gym_only,
         f"{gym_only[0] if gym_only else ''} is an option of gymnasium envs (env=gym); "
         f"env={e.name} is family '{e.family}'")


def _validate_model(cfg: Any) -> None:
    """The model, and the env's measurements (game variables) it may read."""
    m, e = cfg.model, cfg.env
    need(m.core in ("gru", "lstm", "none"), f"model.core must be gru, lstm or none, got '{m.core}'")
    need(m.fc_layers >= 1, f"model.fc_layers must be >= 1, got {m.fc_layers}")
    need(m.obs_norm_eps > 0, f"model.obs_norm_eps must be > 0, got {m.obs_norm_eps}")
    need(m.action_std > 0,
         f"model.action_std must be > 0 (the continuous actions' std at the start), got {m.action_std}")
    need(m.encoder in ("auto", "conv", "nature", "impala", "mlp") or re.fullmatch(r"[\w.]+:\w+", m.encoder),
         f"model.encoder must be auto, conv, nature, impala, mlp or pkg.module:Class (your own), got '{m.encoder}'")
    need(m.mlp_activation in ("elu", "tanh", "relu"),
         f"model.mlp_activation must be elu, tanh or relu, got '{m.mlp_activation}'")
    need(m.init in ("orthogonal", "orthogonal_heads", "torch_default"),
         f"model.init must be orthogonal, orthogonal_heads or torch_default, got '{m.init}'")
    need(not e.measurements or e.family == "doom",
         f"env.measurements=true is a VizDoom option; env family '{e.family}' has no game variables")
    need(not m.measurements or e.measurements,
         f"model.measurements=true (model={m.name}) needs an env with measurements: env.measurements=true "
         f"on a VizDoom env, got env={e.name}")


def _validate_bench(cfg: Any) -> None:
    b = cfg.bench
    need(b.seconds > 0, f"bench.seconds must be > 0, got {b.seconds}")
    for mode in b.modes:
        need(mode in SAMPLER_MODES, f"bench.modes: each must be one of {', '.join(SAMPLER_MODES)}, got '{mode}'")
    need(not b.modes or cfg.nodes == 1, "bench.modes compares training schemes on one node: use nodes=1")
    need(b.soak_s >= 0, f"bench.soak_s must be >= 0 (0: no soak), got {b.soak_s}")
    need(not b.soak_s or (cfg.nodes == 1 and not b.modes),
         "bench.soak_s watches one node's memory: use nodes=1 and no bench.modes")
    need(len(b.scaling_ranks) >= 1 and all(2 <= r <= 64 for r in b.scaling_ranks),
         "bench.scaling_ranks: each must be in [2, 64] (local gloo ranks per measurement), "
         f"got {list(b.scaling_ranks)}")
    need(b.scaling_repeats >= 1, f"bench.scaling_repeats must be >= 1, got {b.scaling_repeats}")
    need(b.scaling_steps >= 1, f"bench.scaling_steps must be >= 1, got {b.scaling_steps}")
    need(b.gpu_iteration_s > 0, f"bench.gpu_iteration_s must be > 0 (seconds, assumed), got {b.gpu_iteration_s}")


def _validate_sync(cfg: Any) -> None:
    """Across nodes: the collectives' settings and the elastic world's bounds."""
    y, t = cfg.sync, cfg.train
    need(y.timeout_s > 0, f"sync.timeout_s must be > 0, got {y.timeout_s}")
    need(0 < y.min_batch_frac <= 1, f"sync.min_batch_frac must be in (0, 1], got {y.min_batch_frac}")
    need(0 < y.ready_frac <= 1, f"sync.ready_frac must be in (0, 1], got {y.ready_frac}")
    need(y.check_every >= 1, f"sync.check_every must be >= 1, got {y.check_every}")
    need(y.stats_every >= 1, f"sync.stats_every must be >= 1, got {y.stats_every}")
    need(y.min_nodes >= 1, f"sync.min_nodes must be >= 1, got {y.min_nodes}")
    need(y.min_nodes <= cfg.nodes, f"sync.min_nodes ({y.min_nodes}) must be <= nodes ({cfg.nodes})")
    need(y.max_nodes == 0 or y.max_nodes >= cfg.nodes,
         f"sync.max_nodes must be 0 (no bound) or >= nodes ({cfg.nodes}), got {y.max_nodes}")
    need(y.settle_s > 0, f"sync.settle_s must be > 0, got {y.settle_s}")
    need(y.backend in ("auto", "gloo", "nccl"), f"sync.backend must be auto, gloo or nccl, got '{y.backend}'")
    need(y.backend != "nccl" or t.device.startswith("cuda"), "sync.backend=nccl needs train.device=cuda")
    need(y.grad_dtype in ("fp32", "bf16"), f"sync.grad_dtype must be fp32 or bf16, got '{y.grad_dtype}'")
    need(isinstance(y.global_batch, bool) or y.global_batch == "auto",
         f"sync.global_batch must be true, false or auto, got '{y.global_batch}'")


def _validate_eval(cfg: Any) -> None:
    need(cfg.eval.every_frames >= 0, f"eval.every_frames must be >= 0 (0: no evaluation), got {cfg.eval.every_frames}")
    need(cfg.eval.episodes >= 1, f"eval.episodes must be >= 1, got {cfg.eval.episodes}")


def node_trajectories(cfg: Any, per_batch: int) -> tuple[int | None, str]:
    """(the trajectories a node learns on in an iteration, how they are counted): its share of the
    world's batch (sync.global_batch), or one round of every env (sync, deterministic); None while
    sampler.num_workers=auto is unresolved (the node checks again once it is: need_minibatches)."""
    s = cfg.sampler
    if in_rounds(s):
        return ((None if s.num_workers == "auto" else s.num_workers * s.envs_per_worker),
                "sampler.num_workers x sampler.envs_per_worker: a round of every env")
    mine = node_batch_size(s, cfg.nodes, splits_batch(cfg.sync.global_batch, cfg.train.device)) // s.rollout
    if mine == per_batch:
        return mine, "sampler.batch_size / sampler.rollout"
    return mine, f"a node's share of sampler.batch_size over {cfg.nodes} nodes / sampler.rollout"


def need_minibatches(a: Any, trajectories: int | None, counted: str) -> None:
    """Every minibatch holds at least one of the node's trajectories: an empty one would still be an
    optimizer step and, with several nodes, an all-reduce."""
    need(trajectories is None or 1 <= a.minibatches <= trajectories,
         f"algo.minibatches must be between 1 and the trajectories a node learns on in a batch ({counted} = "
         f"{trajectories}), got {a.minibatches}")


def _validate_passes(a: Any, trajectories: int | None, counted: str) -> None:
    """algo.epochs and algo.minibatches."""
    need(a.epochs >= 1, f"algo.epochs must be >= 1, got {a.epochs}")
    need(a.kl_coeff >= 0, f"algo.kl_coeff must be >= 0 (0: off), got {a.kl_coeff}")
    need_minibatches(a, trajectories, counted)


def _validate_population(cfg: Any) -> None:
    p, b, s, e = cfg.population, cfg.pbt, cfg.sampler, cfg.env
    need(p.size >= 1, f"population.size must be >= 1, got {p.size}")
    need(p.assign in ASSIGNMENTS, f"population.assign must be one of {', '.join(ASSIGNMENTS)}, got '{p.assign}'")
    need(b.objective in PBT_OBJECTIVES,
         f"pbt.objective must be one of {', '.join(PBT_OBJECTIVES)}, got '{b.objective}'")
    _validate_snapshots(p, e)
    if p.size == 1 and not p.snapshots:
        return
    what = f"population.size={p.size}" if p.size > 1 else f"population.snapshots={p.snapshots}"
    need(s.mode == "async", f"{what} needs sampler.mode=async (rounds of every env serve one policy), got '{s.mode}'")
    if s.num_workers != "auto":  # auto is resolved where the rank starts (nodes.sampling.placement checks it there)
        need_envs_for(p.size, s.num_workers * s.envs_per_worker, e.agents)
    need(b.period_frames >= 0, f"pbt.period_frames must be >= 0 (0: no PBT), got {b.period_frames}")
    need(b.start_frames >= 0, f"pbt.start_frames must be >= 0, got {b.start_frames}")
    need(b.objective != "win" or e.bots > 0 or e.agents > 1,
         f"pbt.objective=win ranks members by their match win rate: env={e.name} plays no VizDoom match")
    need(0 < b.replace_frac <= 0.5, f"pbt.replace_frac must be in (0, 0.5], got {b.replace_frac}")
    need(b.replace_gap >= 0 and b.replace_gap_abs >= 0, "pbt.replace_gap and pbt.replace_gap_abs must be >= 0")
    need(0 <= b.mutation_rate <= 1, f"pbt.mutation_rate must be in [0, 1], got {b.mutation_rate}")
    need(b.perturb > 1, f"pbt.perturb must be > 1 (a factor up or down), got {b.perturb}")
    bad = [m for m in b.mutate if m not in PBT_MUTABLE]
    need(not bad, f"pbt.mutate: each must be one of {', '.join(PBT_MUTABLE)}, got {bad}")


def _validate_loggers(cfg: Any) -> None:
    bad = [name for name in cfg.logger if name not in LOGGERS]
    need(not bad, f"logger: each must be one of {', '.join(LOGGERS)}, got {bad}")
    need(len(set(cfg.logger)) == len(cfg.logger), f"logger: each at most once, got {list(cfg.logger)}")
    if "wandb" not in cfg.logger:
        return
    need(cfg.wandb.mode in WANDB_MODES, f"wandb.mode must be one of online, offline, disabled or '' (W&B's own "
         f"choice: WANDB_MODE, else online), got '{cfg.wandb.mode}'")
    need(bool(cfg.wandb.project), "wandb.project must not be empty")
    try:
        import wandb  # noqa: F401 - the check is that it imports
    except Exception as exc:  # noqa: BLE001 - any failure to import is the same answer to the user
        raise ConfigError(f"logger=[...,wandb] needs the wandb package, which does not import here "
                          f"({one_line(exc)}): pip install wandb") from None


def _validate_snapshots(p: Any, e: Any) -> None:
    need(p.snapshots >= 0, f"population.snapshots must be >= 0, got {p.snapshots}")
    if not p.snapshots:
        return
    need(e.agents > 1, f"population.snapshots are self-play opponents: env={e.name} has no match between agents "
         "(env.agents > 1)")
    need(p.snapshot_every_frames > 0, f"population.snapshot_every_frames must be > 0, got {p.snapshot_every_frames}")
    need(0 < p.snapshot_prob <= 1, f"population.snapshot_prob must be in (0, 1], got {p.snapshot_prob}")


def need_envs_for(size: int, envs: int, agents: int) -> None:
    """Every member needs an env (a seat, in matches between agents) to play: refused otherwise."""
    what = "seats of a rank's matches" if agents > 1 else "envs of a rank"
    need(size <= envs, f"population.size={size} is more than the {envs} {what} can serve: raise "
         "sampler.num_workers x sampler.envs_per_worker")

