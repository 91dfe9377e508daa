"""What the Hydra entry points share: the schema registration, the checks on a composed config,
and where Hydra puts the run and its sweep (the resolved config written there: launch.process.resolved).

Bad input is refused with one line on stderr and exit code 2 before any worker process starts:
the command line is checked point by point with Hydra's own grammar (launch.cli.overrides), and
the config each job composes is checked again here (`resolve`).
"""
from __future__ import annotations

import glob
import os

from omegaconf import OmegaConf

from launch.cli.overrides import register
from launch.process.exits import refuse
from nodes.config.schema import Config
from nodes.config.validate import validate
from nodes.envs import check_env_config
from nodes.errors import CheckpointError, ConfigError
from nodes.models.identity import check_identity, model_identity

register("schema", Config)  # conf/config.yaml's first default: types, defaults, unknown keys


def check(cfg: Config) -> None:
    """Every check a composed config must pass before anything starts (raises ConfigError)."""
    from sync.world import launched_size
    if launched_size() > 1:  # torchrun or srun started the ranks: their count is the run's node count
        cfg.nodes = launched_size()
    validate(cfg)
    spec = check_env_config(cfg.env)
    if spec.keys or cfg.model.encoder != "auto":  # (torch is imported only where a model is built)
        from nodes.models.actor_critic import check_model
        check_model(spec, cfg.model)
    if cfg.run_dir and glob.glob(os.path.join(cfg.run_dir, "checkpoints", "checkpoint_*.pt")):
        # a resume: the checkpoint must hold this model
        from nodes.record import checkpoint as ckpt
        path, saved = ckpt.saved_identities(cfg.run_dir)
        for identity in saved:
            try:
                check_identity(model_identity(spec, cfg.model), identity, path)
            except CheckpointError as exc:
                raise ConfigError(str(exc)) from None
    if cfg.launcher.name == "slurm":
        from launch import slurm
        slurm.check(cfg)
        slurm.need_slurm_commands()
    elif cfg.launcher.name == "hosts":
        from launch.spawn import hosts
        hosts.check(cfg)
    elif cfg.launcher.name != "local":
        raise ConfigError(f"launcher={cfg.launcher.name} is not available; use launcher=local, hosts or slurm")


def resolve(cfg, run_dir: str) -> Config:
    """Composed DictConfig -> validated plain Config object (fast attribute access, picklable)."""
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = os.path.abspath(run_dir)
    if not cfg.wandb.group:
        cfg.wandb.group = sweep_name()  # a sweep's runs side by side in W&B
    obj: Config = OmegaConf.to_object(cfg)
    try:
        check(obj)
    except ConfigError as exc:
        refuse(str(exc))
    return obj


def hydra_run_dir() -> str:
    from hydra.core.hydra_config import HydraConfig
    return HydraConfig.get().runtime.output_dir


def sweep_name() -> str:
    """In a Hydra multirun (-m) the sweep directory's name, which every job of the sweep shares; else ""."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return ""
    return os.path.basename(os.path.normpath(HydraConfig.get().sweep.dir))
