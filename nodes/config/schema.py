"""The structured config's root, `Config`: its sections and its top-level keys.

Every default lives in these dataclasses: the root's top-level keys here, each section's keys in
the module that defines it (nodes.config.agent: env, model, algo; nodes.config.execution: sampler,
train, sync, eval; nodes.config.population: population, pbt; nodes.config.tools: launcher, bench,
wandb). `Config` is registered in Hydra's ConfigStore as `schema` (launch.cli.app), the first
entry of conf/config.yaml's defaults list. Its defaults are what `python -m launch.train` runs
with: VizDoom basic, the simplified model, APPO, the async sampler on this machine. The option
files under conf/<group>/ hold only what differs from these defaults (tests/test_config_defaults.py
checks that composing conf/ gives exactly `Config()` and that no option file repeats a default).

What the sampler's buffers and batches derive from a config is nodes.config.layout's. Which values
are allowed is nodes.config.validate's job (`validate(cfg)`, run by the launcher before any worker
process starts).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nodes.config.agent import AlgoConfig, EnvConfig, ModelConfig
from nodes.config.execution import EvalConfig, SamplerConfig, SyncConfig, TrainConfig
from nodes.config.population import PbtConfig, PopulationConfig
from nodes.config.tools import BenchConfig, LauncherConfig, WandbConfig


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
    seed: int = 0  # env, sampling and initialisation seeds all derive from it (nodes.seeds)
    nodes: int = 1  # >1: one full Sample Factory node per process or machine (sync/)
    run_dir: str | None = None  # filled in by the launcher (Hydra's output dir)
