"""The configuration reference (docs/configuration.md), generated from the dataclasses of nodes/config/.

    python -m launch.config_docs > docs/configuration.md

Every key of the structured config, its default and its meaning: the comments beside and above
each field in the module that defines its dataclass (nodes.config.schema's root and the section
modules it imports: the one home of every default), and each section's docstring.
tests/test_docs.py checks the page in the repository is what this prints, so the reference
cannot fall behind the code.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import tokenize
from types import ModuleType

from nodes.config.schema import Config

HEADER = """# Configuration reference

Every key of the config, its default and what it means, generated from `nodes/config/` (the one
home of every default) by `python -m launch.config_docs`; do not edit this page by hand. Set a key
on the command line (`python -m launch.train sampler.num_workers=4 algo.lr=3e-4`), pick a group's
option file (`env=doom_defend_the_center`, `model=impala`: `conf/<group>/`, which holds only what
differs from these defaults), and print a run's whole resolved config with
`python -m launch.train --cfg job` (every run directory keeps its own as `config.yaml`). Bad values
are refused in one line before anything starts (`nodes/config/validate.py`).
"""


def _comments(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


@functools.cache
def _module_source(module: ModuleType) -> tuple[str, dict[int, str]]:
    """A config module's source and its comments by line (each module read once for all its dataclasses)."""
    source = inspect.getsource(module)
    return source, _comments(source)


def _field_docs(cls) -> dict[str, str]:
    """Each field of dataclass `cls`: the comment lines right above it, then the one on its line, read
    from the source of the module that defines it."""
    source, comments = _module_source(inspect.getmodule(cls))
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    lines = source.splitlines()
    docs = {}
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        above, n = [], stmt.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        beside = comments.get(stmt.end_lineno, "")
        docs[stmt.target.id] = " ".join(part for part in [*above, beside] if part)
    return docs


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"' if v == "" else v
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return repr(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(prefix: str, obj, docs: dict[str, str]) -> list[str]:
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            continue  # a section of its own
        rows.append(f"| `{prefix}{f.name}` | `{_cell(_value(value))}` | {_cell(docs.get(f.name, ''))} |")
    return rows


def render() -> str:
    root = Config()
    out = [HEADER]
    top_docs = _field_docs(Config)
    out += ["## Top level", "", *_table("", root, top_docs), ""]
    for f in dataclasses.fields(root):
        section = getattr(root, f.name)
        if not dataclasses.is_dataclass(section):
            continue
        cls = type(section)
        out.append(f"## `{f.name}`")
        out.append("")
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__ + "("):  # a docstring of its own, not the generated signature
            out += [" ".join(doc.split()), ""]
        if top_docs.get(f.name):
            out += [top_docs[f.name], ""]
        out += [*_table(f"{f.name}.", section, _field_docs(cls)), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
