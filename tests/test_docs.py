"""The documentation site: it builds with `mkdocs build --strict` (a broken link, a missing page or
a page left out of the nav fails), its configuration reference is what nodes/config/ says
today (launch.config_docs generates it), and every command its shell blocks show is one the
entry point accepts."""
import contextlib
import dataclasses
import glob
import importlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, missing_dependency

from launch import config_docs
from nodes.config.schema import Config


def test_the_configuration_reference_is_generated_from_the_code_as_it_is():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        page = f.read()
    assert page == config_docs.render(), ("docs/configuration.md is stale: "
                                          "python -m launch.config_docs > docs/configuration.md")


def test_the_reference_names_every_key_with_its_default_and_a_meaning():
    page = config_docs.render()
    rows = {line.split("|")[1].strip().strip("`"): line for line in page.splitlines() if line.startswith("| `")}

    def keys(obj, prefix=""):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from keys(value, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}", value

    for key, _ in keys(Config()):
        assert key in rows, f"{key} is missing from the reference"
        meaning = rows[key].rstrip().rstrip("|").split("|")[-1].strip()
        assert meaning, f"{key} has no meaning in nodes/config/ (a comment beside or above it)"
    assert "| `algo.lr` | `0.0001` |" in page and "| `sampler.mode` | `async` |" in page


def test_the_site_builds_strict(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-m", "mkdocs", "--version"],
                                                         capture_output=True).returncode != 0:
        missing_dependency("mkdocs is not installed (pip install -e .[docs]; setup.sh installs it)")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in ("index.html", "environments/index.html", "configuration/index.html", "changelog/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    html = (tmp_path / "site" / "configuration" / "index.html").read_text()
    assert "sampler.num_workers" in html and "<table>" in html


def shell_commands():
    """(where it first is, argv after `python`) of each distinct `python -m launch.X` and `python
    examples/X.py` line of the fenced bash blocks of README.md and docs/*.md (continuation lines
    joined, comments cut)."""
    out, seen = [], set()
    for path in [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        text = open(path).read()
        for block in re.finditer(r"^```(?:bash|sh|shell|console)\n(.*?)^```", text, re.S | re.M):
            first = text.count("\n", 0, block.start(1)) + 1
            for i, line in enumerate(re.split(r"(?<!\\)\n", block.group(1))):
                line = line.replace("\\\n", " ").split(" # ")[0]
                found = re.search(r"(?:^|\s)python (-m launch\.\w+|examples/\w+\.py)\b(.*)", line)
                argv = [*found.group(1).split(), *shlex.split(found.group(2))] if found else None
                if argv and tuple(argv) not in seen:
                    seen.add(tuple(argv))
                    out.append((f"{os.path.relpath(path, ROOT)}:{first + i}", argv))
    return out


# what an example script composes before the overrides it is given (its api.config call)
EXAMPLE_CONFIG = {"examples/own_env.py": ["env=gym", "env.make=own_env:make_catch"],
                  "examples/own_model.py": ["env=gym", "env.make=own_env:make_catch",
                                            "model.encoder=own_model:CatchEncoder"]}
# refusals that say what this machine lacks, not what the command got wrong
MACHINE = ("pip install", "run it as root", "not found: launcher=slurm")


def accepted(argv) -> None:
    """The command's own check before anything starts, in this process: overrides parsed and
    composed, then validated as the entry point validates them (ConfigError or SystemExit)."""
    from launch.cli.overrides import check_command, compose_checked
    if argv[0] == "examples/play_onnx.py":  # its own argparse options (an export folder, no config)
        import play_onnx
        play_onnx.parser().parse_args(argv[1:])
        return
    if argv[0].startswith("examples/"):
        from launch import api
        from launch.cli.app import check
        check(api.config(*EXAMPLE_CONFIG[argv[0]], *argv[1:]))
        return
    module, args = argv[1], [a for a in argv[2:] if a != "..."]
    if module == "launch.import_sf":  # its own arguments and the env's overrides
        from launch.import_sf import parse
        parse(args)
    elif module in ("launch.enjoy", "launch.export", "launch.push"):
        importlib.import_module(module)  # registers its options
        compose_checked(module.split(".")[1], args)
    elif module == "launch.curves":  # a usage line's [optional] parts as given
        from launch.curves import _parser
        _parser().parse_args([a.strip("[]") for a in args if a.strip("[].")])
    elif module != "launch.node":  # (a run directory, nothing to check)
        check_command(args, importlib.import_module(module).check)


COMMANDS = shell_commands()


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_command_the_docs_show_is_accepted(where, argv, monkeypatch):
    """Each command as a user pastes it passes the checks its entry point runs before anything
    starts (no run, no process): a command the docs show is never refused."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples"))  # PYTHONPATH=examples, as the docs set it
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            accepted(argv)
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - the refusal is the failure's message
        said = err.getvalue().strip() or f"{type(exc).__name__}: {exc}"
        if any(m in said for m in MACHINE):
            missing_dependency(f"{where}: {said}")
        pytest.fail(f"{where}: python {' '.join(argv)}\n{said}", pytrace=False)
