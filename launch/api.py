"""The Python API: train, evaluate and watch from a script or a notebook, with the command line's
config (docs/python-api.md).

    from launch import api
    cfg = api.config("env=gym", "env.id=CartPole-v1", "train.max_env_frames=50000")
    summary = api.train(cfg, run_dir="runs/cartpole")       # summary.json's contents
    result = api.evaluate("runs/cartpole", episodes=20)      # mean reward of the latest checkpoint
    api.enjoy("runs/cartpole", "enjoy.video=true")           # launch.enjoy's options

`config` composes conf/config.yaml with Hydra's override grammar (the command line's); `env_make=`
and `model_encoder=` take your own function and nn.Module class as objects. The run is the
command line's single-node run (nodes=N: N processes on this machine); bad input raises
ConfigError (one line) before any process starts.

Your env factory and encoder class must be importable by every process of the run: the workers
import them by name. A function or class defined in the script you run (module `__main__`) is
named by the script's file name (`my_train.py` -> `my_train:make_env`) and the script's directory
goes on the path of every process, so a worker imports the script as a module: its top level runs
there too, and whatever trains must sit under `if __name__ == "__main__":`. A notebook's own
functions have no file to import from: put them in a .py module beside it.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from nodes.config.schema import Config
from nodes.errors import ConfigError

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def config(*overrides: str, env_make=None, model_encoder=None) -> Config:
    """The composed, validated config: conf/config.yaml with `overrides` as on the command line
    ("env=gym", "train.max_env_frames=1e5", "+env.kwargs.size=8"). env_make / model_encoder: a
    function returning a gymnasium.Env / an encoder class (nodes.models.inputs), as objects."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from launch.cli.overrides import register
    register("schema", Config)
    extra = list(overrides)
    if env_make is not None:
        extra.append(f"env.make={import_path(env_make, 'env_make')}")
    if model_encoder is not None:
        extra.append(f"model.encoder={import_path(model_encoder, 'model_encoder')}")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            composed = compose(config_name="config", overrides=extra)
    except Exception as exc:  # noqa: BLE001 - Hydra's errors for a bad override, in one line
        from nodes.errors import one_line
        raise ConfigError(f"config: {one_line(exc)}") from None
    OmegaConf.set_struct(composed, False)
    composed.run_dir = ""
    return OmegaConf.to_object(composed)


def import_path(obj, what: str) -> str:
    """A function or class -> 'module:qualname' that a worker process can import (see the module's
    docstring for one defined in the script that runs)."""
    if isinstance(obj, str):
        return obj
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module is None or "<" in name or "." in name:
        raise ConfigError(f"{what}: {obj!r} is not a module-level function or class; workers import it by name")
    if module == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if not path:
            raise ConfigError(f"{what}: {name} is defined in a notebook or an interactive session, which the "
                              "workers cannot import: put it in a .py module beside it")
        module = os.path.splitext(os.path.basename(path))[0]
        _on_path(os.path.dirname(os.path.abspath(path)))
    return f"{module}:{name}"


def _on_path(directory: str) -> None:
    """`directory` importable here and in every process this one starts (PYTHONPATH)."""
    if directory not in sys.path:
        sys.path.insert(0, directory)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if directory not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, *parts])


def _cfg(cfg: Config | list | tuple | str) -> Config:
    if isinstance(cfg, str):
        return config(cfg)
    if isinstance(cfg, (list, tuple)):
        return config(*cfg)
    return cfg


def train(cfg: Config | list[str], run_dir: str) -> dict[str, Any]:
    """Train as `python -m launch.train` does (one node in this process; nodes=N: N processes on this
    machine) into run_dir (an existing run there resumes); returns its summary.json. Raises
    ConfigError (bad input, before anything starts) or RuntimeError (the run failed: its log)."""
    from launch.cli.app import check
    from launch.process.logs import rank_logging
    from launch.process.resolved import write_resolved
    from launch.spawn.driver import run_node
    cfg = _cfg(cfg)
    cfg.run_dir = os.path.abspath(run_dir)
    check(cfg)
    write_resolved(cfg)
    if cfg.nodes > 1:
        from launch.spawn.local import spawn_nodes
        code = spawn_nodes(cfg)
    else:
        rank_logging(cfg.run_dir, 0, under_hydra=True)  # keeps the caller's console handlers
        code = run_node(cfg, last=False)
    summary = _summary(cfg.run_dir)
    if code:
        raise RuntimeError(f"the run in {cfg.run_dir} ended with exit code {code}"
                           f" ({summary.get('outcome', 'no summary')}): see {cfg.run_dir}/train.log")
    return summary


def _summary(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def evaluate(run_dir: str, *overrides: str, episodes: int = 10) -> dict[str, Any]:
    """The latest checkpoint of run_dir played for `episodes` episodes (launch.enjoy's options as
    overrides: "enjoy.greedy=true", "enjoy.checkpoint=best"); returns its figures."""
    return _enjoy(run_dir, [f"enjoy.episodes={episodes}", *overrides])


def enjoy(run_dir: str, *overrides: str) -> dict[str, Any]:
    """launch.enjoy in this process (its options as overrides: "enjoy.video=true"); returns its figures."""
    return _enjoy(run_dir, list(overrides))


def _enjoy(run_dir: str, overrides: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    from launch import enjoy as enjoy_cmd
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):  # a refusal's one line becomes the ConfigError's
            result = enjoy_cmd.run([f"run_dir={os.path.abspath(run_dir)}", *overrides])
    except SystemExit:
        raise ConfigError(err.getvalue().strip().removeprefix("error: ") or "launch.enjoy refused") from None
    print(result.pop("said"), flush=True)
    return result
