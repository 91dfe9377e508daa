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

import copy
import json
import os
import sys
from typing import Any

from nodes.config.schema import Config
from nodes.errors import ConfigError

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def config(*overrides: str, env_make=None, model_encoder=None) -> Config:
    """The composed, validated config: conf/config.yaml with `overrides` as on the command line
    ("env=gym", "train.max_env_frames=1e5", "+env.kwargs.size=8"), refused as there (ConfigError,
    one line). env_make / model_encoder: a function returning a gymnasium.Env / an encoder class
    (nodes.models.inputs), as objects. Whether the env and model can be made is checked by train."""
    from hydra.core.global_hydra import GlobalHydra

    from launch.cli.overrides import _schema, compose_checked, register
    from nodes.config.validate import validate
    register("schema", Config)
    extra = list(overrides)
    if env_make is not None:
        extra.append(f"env.make={import_path(env_make, 'env_make')}")
    if model_encoder is not None:
        extra.append(f"model.encoder={import_path(model_encoder, 'model_encoder')}")
    hydra = GlobalHydra.instance()
    if hydra.is_initialized():
        raise ConfigError("api.config composes conf/ with Hydra, which is already initialised in this process "
                          "(inside a @hydra.main app): call it outside")
    cfg = compose_checked("config", extra, _schema("config"))
    cfg.run_dir = ""
    validate(cfg)
    return cfg


def import_path(obj, what: str) -> str:
    """A function or class -> 'module:qualname' that a worker process can import (see the module's
    docstring for one defined in the script that runs)."""
    if isinstance(obj, str):
        return obj
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not name or "<" in name or "." in name:
        raise ConfigError(f"{what}: {obj!r} is not a module-level function or class; workers import it by name")
    if module == "__main__":
        main = sys.modules["__main__"]
        spec_name = getattr(getattr(main, "__spec__", None), "name", None)
        if spec_name:  # python -m pkg.script: workers import it by that name (its relative imports hold)
            return f"{spec_name}:{name}"
        path = getattr(main, "__file__", None)
        if not path:
            raise ConfigError(f"{what}: {name} is defined in a notebook or an interactive session, which the "
                              "workers cannot import: put it in a .py module beside it")
        module = os.path.splitext(os.path.basename(path))[0]
        if not module.isidentifier():
            raise ConfigError(f"{what}: the script {os.path.basename(path)} is not a module name workers could "
                              "import (letters, digits, _): rename it")
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
    ConfigError (bad input, before anything starts) or RuntimeError (the run failed: its log).
    `cfg` is not changed (the run trains on a copy)."""
    from launch.cli.app import check
    from launch.process.logs import run_log
    from launch.process.resolved import write_resolved
    from launch.spawn.driver import run_node
    cfg = copy.deepcopy(_cfg(cfg))
    if cfg.launcher.name != "local":
        raise ConfigError(f"api.train runs launcher=local; launcher={cfg.launcher.name} runs from the command line "
                          "(python -m launch.train ...)")
    cfg.run_dir = os.path.abspath(run_dir)
    check(cfg)
    write_resolved(cfg)
    if cfg.nodes > 1:
        from launch.spawn.local import spawn_nodes
        code = spawn_nodes(cfg)
    else:
        with run_log(cfg.run_dir):  # the caller's logging as it was, after
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
        lines = err.getvalue().splitlines()
        refusal = [ln for ln in lines if ln.startswith("error: ")]
        sys.stderr.write("".join(ln + "\n" for ln in lines if ln not in refusal[-1:]))  # the rest, as it came
        raise ConfigError(refusal[-1].removeprefix("error: ") if refusal else "launch.enjoy refused") from None
    sys.stderr.write(err.getvalue())  # warnings, as they came
    print(result.pop("said"), flush=True)
    return result
