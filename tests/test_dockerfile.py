"""The Dockerfile, read as text (no Docker engine here, and its torch index is not reachable): the same
torch pin as setup.sh, extras that pyproject.toml defines, a Slurm client for requeue, and torch
installed before any code is copied. hadolint runs on it in test_packaging.py."""
import os
import re

from tests.helpers import ROOT

# Debian packages that put scontrol on PATH (slurm-wlm depends on slurm-client)
SCONTROL_PACKAGES = {"slurm-client", "slurm-wlm"}


def _read(name):
    return open(os.path.join(ROOT, name)).read()


def instructions():
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    lines = [line for line in _read("Dockerfile").splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip())
            for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def arg_default(name):
    values = [re.fullmatch(rf"{name}=(\S+)", args) for op, args in instructions() if op == "ARG"]
    values = [m.group(1) for m in values if m]
    assert len(values) == 1, f"the Dockerfile must declare ARG {name}=<default> once: {values}"
    return values[0]


def runs():
    return [args for op, args in instructions() if op == "RUN"]


def test_torch_pin_equals_setup_sh():
    setup = re.findall(r"\btorch==([\w.+]+)", _read("setup.sh"))
    assert len(setup) == 1, f"setup.sh must pin torch once: {setup}"
    assert arg_default("TORCH_VERSION") == setup[0]
    torch_runs = [r for r in runs() if re.search(r"\btorch\b", r)]
    assert len(torch_runs) == 1, f"torch is installed in one RUN: {torch_runs}"
    assert '"torch==${TORCH_VERSION}"' in torch_runs[0] and '--index-url "${TORCH_INDEX}"' in torch_runs[0]
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/cu\d+", arg_default("TORCH_INDEX")), \
        "the image installs a CUDA build of torch"
    assert not re.search(r"torch[=<>~]=", _read("Dockerfile").replace("torch==${TORCH_VERSION}", "")), \
        "a second torch pin in the Dockerfile"


def _extras_in_pyproject():
    """Keys of [project.optional-dependencies] (read as text: tomllib is Python 3.11+)."""
    section = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", _read("pyproject.toml"),
                        re.M | re.S)
    assert section, "pyproject.toml has no [project.optional-dependencies]"
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section.group(1), re.M))


def test_installed_extras_exist_in_pyproject():
    installed = [m.group(1) for r in runs() for m in re.finditer(r"""pip install [^&]*-e ["']?\.\[([^\]]*)\]""", r)]
    assert installed, "the Dockerfile installs the project with extras"
    extras = {e.strip() for group in installed for e in group.split(",")}
    assert {"atari", "video"} <= extras
    assert extras <= _extras_in_pyproject(), f"unknown extras: {extras - _extras_in_pyproject()}"


def test_installs_a_package_that_provides_scontrol():
    apt = set()
    for r in runs():
        for m in re.finditer(r"apt-get install ([^&;|]*)", r):
            apt |= {word for word in m.group(1).split() if not word.startswith("-")}
    assert apt & SCONTROL_PACKAGES, f"no scontrol (launch/slurm/preemption.py requeue) in the image: apt installs {apt}"


def test_torch_and_dependencies_installed_before_the_code_is_copied():
    ops = instructions()
    first_code_copy = next(i for i, (op, args) in enumerate(ops)
                           if op == "COPY" and re.search(r"\b(nodes|sync|launch|conf)\b", args))
    torch_run = next(i for i, (op, args) in enumerate(ops) if op == "RUN" and "torch==" in args)
    deps_run = next(i for i, (op, args) in enumerate(ops) if op == "RUN" and ".[" in args)
    assert torch_run < deps_run < first_code_copy
    for pkg in ("nodes", "sync", "launch", "conf"):
        assert any(op == "COPY" and re.search(rf"\b{pkg}\b", args) for op, args in ops), f"{pkg}/ not copied"


def test_nccl_debug_and_default_command():
    ops = instructions()
    assert any(op == "ENV" and re.search(r"\bNCCL_DEBUG=WARN\b", args) for op, args in ops)
    assert ops[-1] == ("CMD", '["python", "-m", "launch.train"]')
