"""The documentation site: it builds with `mkdocs build --strict` (a broken link, a missing page or
a page left out of the nav fails), and its configuration reference is what nodes/config/ says
today (launch.config_docs generates it)."""
import dataclasses
import os
import shutil
import subprocess
import sys

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
