"""The Python API: train, evaluate and watch from a script or a notebook, with the command line's
config (docs/python-api.md).

    from launch import api
    cfg = api.config("env=gym", "env.id=CartPole-v1", "train.max_env_frames=50000")
    summary = api.train(cfg, run_dir="runs/cartpole")       # summary.json's contents
    result = api.evaluate("runs/cartpole", episodes=20)      # mean reward of the latest checkpoint
    api.enjoy("runs/cartpole", "enjoy.video=true")           # launch.enjoy's options
    api.export("runs/cartpole")                              # runs/cartpole/export: ONNX, TorchScript, card
    api.evaluate("hf://user/name", episodes=5)               # an export on the Hugging Face Hub, or its folder

`config` composes conf/config.yaml with Hydra's override grammar (the command line's); `env_make=`
and `model_encoder=` take your own function and nn.Module class as objects. The run is the
command line's single-node run (nodes=N: N processes on this machine), its log lines on stdout as
the command line prints them (quiet=True: its warnings only); bad input raises ConfigError (one
line, the command line's) before any process starts, and so does a run its node refuses.

Your env factory and encoder class must be importable by every process of the run: the workers
import them by name. A function or class defined in the script you run (module `__main__`) is
named by the script's file name (`my_train.py` -> `my_train:make_env`) and the script's directory
goes on the path of every process, so a worker imports the script as a module: its top level runs
there too, and whatever trains must sit under `if __name__ == "__main__":`. A notebook's own
functions have no file to import from: put them in a .py module beside it.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
import time
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
        if not path or not os.path.isfile(path):  # python - names its script '<stdin>'
            raise ConfigError(f"{what}: {name} is defined in {_fileless(path)}")
        module = os.path.splitext(os.path.basename(path))[0]
        if not module.isidentifier():
            raise ConfigError(f"{what}: the script {os.path.basename(path)} is not a module name workers could "
                              "import (letters, digits, _): rename it")
        _on_path(os.path.dirname(os.path.abspath(path)))
    return f"{module}:{name}"


def _fileless(path: str | None) -> str:
    """A main module without a file, in words, and what to do."""
    if path == "<stdin>":
        where, fix = "a script read from standard input (python -)", "save the script as a .py file"
    elif sys.argv[:1] == ["-c"]:
        where, fix = "a python -c command", "put it in a .py module"
    else:
        where, fix = "a notebook or an interactive session", "put it in a .py module beside it"
    return f"{where}, which the workers cannot import: {fix}"


@contextlib.contextmanager
def command_line_refusals():
    """For a script that takes overrides on its command line (examples/own_env.py): a ConfigError
    in the block (bad input, refused) ends it as python -m launch.train refuses bad input, with the
    one line `error: ...` on stderr and exit code 2, not a traceback."""
    from launch.process.exits import refuse
    try:
        yield
    except ConfigError as exc:
        refuse(str(exc))


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


def train(cfg: Config | list[str], run_dir: str, quiet: bool = False) -> dict[str, Any]:
    """Train as `python -m launch.train` does (one node in this process; nodes=N: N processes on this
    machine) into run_dir (an existing run there resumes); returns its summary.json. Its log lines
    show on stdout as the command line shows them (quiet: its warnings and errors only; all go to
    run_dir/train.log). Raises ConfigError (bad input; a run its node refuses: the refusal's line)
    or RuntimeError (the run failed: its log). `cfg` is not changed (the run trains on a copy)."""
    from launch.cli.app import check
    from launch.process.logs import console_log, run_log
    from launch.process.resolved import write_resolved
    from launch.spawn.driver import run_node
    cfg = copy.deepcopy(_cfg(cfg))
    if cfg.launcher.name != "local":
        raise ConfigError(f"api.train runs launcher=local; launcher={cfg.launcher.name} runs from the command line "
                          "(python -m launch.train ...)")
    cfg.run_dir = os.path.abspath(run_dir)
    check(cfg)
    replaced = write_resolved(cfg)  # put back if a node refuses the run (a checkpoint that does not fit)
    started = time.time()
    with console_log(quiet), _HeldRefusal(sys.stderr) as refusal:
        if cfg.nodes > 1:
            from launch.spawn.local import spawn_nodes
            code = spawn_nodes(cfg)
        else:
            with run_log(cfg.run_dir):  # the caller's logging as it was, after
                code = run_node(cfg, last=False)
    replaced.settle(code)
    if code == 2 and refusal.line:
        raise ConfigError(refusal.line.removeprefix("error: "))
    if refusal.line:  # another exit's line (75: too few nodes left), as the command line prints it
        print(refusal.line, file=sys.stderr, flush=True)
    summary = _summary(cfg.run_dir, since=started)
    if code:
        raise RuntimeError(f"the run in {cfg.run_dir} ended with exit code {code}"
                           f" ({summary.get('outcome', 'no summary')}): see {cfg.run_dir}/train.log")
    return summary


def _summary(run_dir: str, since: float = 0.0) -> dict:
    """run_dir's summary.json; {} when there is none written since `since` (a time.time())."""
    path = os.path.join(run_dir, "summary.json")
    try:
        if os.path.getmtime(path) < since:
            return {}
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class _HeldRefusal(io.TextIOBase):
    """sys.stderr while a node runs in this process: each line goes on to `stream` as it comes, but
    the last `error: ...` line (what launch.process.exits.report prints for the command line) is
    held in `line`, for api.train to raise as a ConfigError (the line once, as the exception) or
    print. The block ended by an exception: the held line goes on to `stream`."""

    def __init__(self, stream):
        super().__init__()
        self.stream, self.line, self._held, self._at_start = stream, "", "", True

    def __enter__(self):
        self._saved, sys.stderr = sys.stderr, self
        return self

    def __exit__(self, *exc_info) -> None:
        sys.stderr = self._saved
        rest = (self.line + "\n" if exc_info[0] is not None and self.line else "") + self._held
        if rest:
            self.stream.write(rest)

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self._held or (self._at_start and piece.startswith("error: ")):
                self._held += piece
                if piece.endswith("\n"):
                    if self.line:  # an earlier one: not the last, so as it came
                        self.stream.write(self.line + "\n")
                    self.line, self._held = self._held.rstrip("\n"), ""
            else:
                self.stream.write(piece)
            self._at_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:  # (what is written to the descriptor itself is not held)
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self):
        return self.stream.encoding


def evaluate(run_dir: str, *overrides: str, episodes: int = 10) -> dict[str, Any]:
    """The latest checkpoint of run_dir played for `episodes` episodes (launch.enjoy's options as
    overrides: "enjoy.greedy=true", "enjoy.checkpoint=best"); returns its figures. run_dir may be
    an export folder or hf://user/name (an export on the Hugging Face Hub)."""
    return _enjoy(run_dir, [f"enjoy.episodes={episodes}", *overrides])


def enjoy(run_dir: str, *overrides: str) -> dict[str, Any]:
    """launch.enjoy in this process (its options as overrides: "enjoy.video=true"); returns its figures."""
    return _enjoy(run_dir, list(overrides))


def export(run_dir: str, *overrides: str) -> dict[str, Any]:
    """launch.export in this process (its options as overrides: "format=onnx", "checkpoint=best",
    "out=PATH"); returns the folder and its files."""
    from launch import export as export_cmd
    return _in_process(export_cmd.run, "launch.export", [f"run_dir={os.path.abspath(run_dir)}", *overrides])


def _enjoy(run_dir: str, overrides: list[str]) -> dict[str, Any]:
    from launch import enjoy as enjoy_cmd
    from launch.share.loading import HUB
    where = run_dir if run_dir.startswith(HUB) else os.path.abspath(run_dir)
    result = _in_process(enjoy_cmd.run, "launch.enjoy", [f"run_dir={where}", *overrides])
    print(result.pop("said"), flush=True)
    return result


def _in_process(run, name: str, argv: list[str]) -> dict[str, Any]:
    """An entry point's run(argv) in this process: its refusal (the one `error:` line and exit 2 of
    the command line) becomes a ConfigError whose message is that line."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            result = run(argv)
    except SystemExit:
        lines = err.getvalue().splitlines()
        refusal = [ln for ln in lines if ln.startswith("error: ")]
        sys.stderr.write("".join(ln + "\n" for ln in lines if ln not in refusal[-1:]))  # the rest, as it came
        raise ConfigError(refusal[-1].removeprefix("error: ") if refusal else f"{name} refused") from None
    sys.stderr.write(err.getvalue())  # warnings, as they came
    return result
