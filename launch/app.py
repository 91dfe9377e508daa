"""What every entry point shares: the Hydra config tree, its schema, and one-line refusals.

Bad input is refused with one line on stderr and exit code 2 before any worker process starts:
unknown config-group options are checked against conf/ before Hydra composes (Hydra's own
message spans many lines), semantic checks run on the composed config (nodes.config.validate).
"""
from __future__ import annotations

import os
import sys

from hydra.core.config_store import ConfigStore
import yaml
from omegaconf import OmegaConf

from nodes.config import Config, ConfigError, validate

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
GROUPS = ("env", "sampler", "model", "algo", "launcher")

ConfigStore.instance().store(name="schema", node=Config)


def refuse(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def precheck_argv(argv) -> None:
    """Refuse, in one line, overrides that Hydra would refuse in many.

    `group=option` must name a file in conf/<group>/; `a.b=value` must name a key of the schema
    and a value of its type. Sweeps (`a=1,2`) are checked value by value.
    """
    schema = OmegaConf.structured(Config)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key.startswith("hydra"):
            continue
        values = value.split(",") if "," in value and not value.startswith(("[", "{")) else [value]
        if key in GROUPS:
            options = sorted(f[:-5] for f in os.listdir(os.path.join(CONF_DIR, key)) if f.endswith(".yaml"))
            for v in values:
                if v not in options and key == "env" and v.startswith("atari_"):
                    games = ", ".join(o for o in options if o.startswith("atari_"))
                    refuse(f"unknown env '{v}' (Atari confs: {games}; any other game: env=atari env.id=ALE/<Game>-v5)")
                if v not in options:
                    refuse(f"unknown {key} '{v}' (available: {', '.join(options)})")
            continue
        if OmegaConf.select(schema, key, default="__missing__") == "__missing__":
            refuse(f"unknown config key '{key}'")
        for v in values:
            try:
                OmegaConf.update(schema, key, yaml.safe_load(v) if v else v, merge=True)
            except Exception as exc:  # noqa: BLE001 - OmegaConf raises several validation types
                first = str(exc).strip().splitlines()[0]
                refuse(f"bad value for {key}: {first}")


def resolve(cfg, run_dir: str) -> Config:
    """Composed DictConfig -> validated plain Config object (fast attribute access, picklable)."""
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = os.path.abspath(run_dir)
    obj: Config = OmegaConf.to_object(cfg)
    try:
        validate(obj)
    except ConfigError as exc:
        refuse(str(exc))
    return obj


def write_resolved(obj: Config) -> None:
    os.makedirs(obj.run_dir, exist_ok=True)
    path = os.path.join(obj.run_dir, "config.yaml")
    with open(path + ".tmp", "w") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.structured(obj)))
    os.replace(path + ".tmp", path)


def hydra_run_dir() -> str:
    from hydra.core.hydra_config import HydraConfig
    return HydraConfig.get().runtime.output_dir
