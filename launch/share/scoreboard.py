"""The Scoreboard's rows as data: docs/scoreboard.md is the one place they are written, and three
readers take them from it: tests/test_headlines.py (every page that restates a row must agree
with it), the docs' build hook docs_hooks/landing_figures.py (the landing page's headline figures)
and the model card of an export (launch/share/card.py quotes its task's row).

A row is a line of one of the page's tables whose columns are task, ours, Sample Factory, ours /
SF, verdict, measured. A cell gives one figure per seed separated by " / ", or their mean with a
remark in parentheses ("11.81 (6 seeds)": the mean of six); the remark is not a figure.
"""
from __future__ import annotations

import dataclasses
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCOREBOARD = os.path.join(ROOT, "docs", "scoreboard.md")
FIGURE = re.compile(r"-?\d{1,3}(?:,\d{3})+|-?\d+\.\d+|-?\d+")
DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})((?:/\d{2})*)")


@dataclasses.dataclass
class Row:
    table: str  # the page's "## " section: Learning or Throughput
    family: str  # the "### " section above the table (VizDoom, Atari, MuJoCo), or the table's own
    cells: list[str]  # as written: task, ours, Sample Factory, ours / SF, verdict, measured
    anchor: str  # the id of the row's block (its verdict links to it)

    @property
    def task(self) -> str:
        return self.cells[0]

    @property
    def ours(self) -> list[float]:
        return figures(self.cells[1])

    @property
    def theirs(self) -> list[float]:
        return figures(self.cells[2])

    @property
    def ratio(self) -> str:
        return self.cells[3]

    @property
    def verdict(self) -> str:
        return re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", self.cells[4])

    @property
    def seeds(self) -> tuple[int, int]:
        """How many seeds (or pairs of runs) each side's cell stands for."""
        return seeds(self.cells[1]), seeds(self.cells[2])

    @property
    def date(self) -> str:
        """The latest day in the measured cell, as YYYY-MM-DD (`2026-11-28/29` -> `2026-11-29`)."""
        days = []
        for y, m, d, more in DATE.findall(self.cells[5]):
            days.append(f"{y}-{m}-{(more.split('/')[-1] or d) if more else d}")
        return max(days, default="")


def figures(cell: str) -> list[float]:
    """The figures of a cell, its parenthesised remarks left out; [] for "-" or a range."""
    text = re.sub(r"\(.*?\)", "", cell)
    if re.search(r"\d\s*-\s*\d|~", text):  # a range or an approximate figure: no per-seed figures
        return []
    return [float(t.replace(",", "")) for t in FIGURE.findall(text)]


def seeds(cell: str) -> int:
    said = re.search(r"\((\d+) (?:seeds|pairs)\)", cell)
    return int(said.group(1)) if said else len(figures(cell))


def rows(text: str) -> list[Row]:
    """Every row of every table of the page with a verdict column, in the page's order."""
    out, table, family, header = [], "", "", None
    for line in text.splitlines():
        if line.startswith("## "):
            table = family = line[3:].strip()
        elif line.startswith("### "):
            family = line[4:].strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if len(cells) != 6 or header[4] != "verdict" or set(line) <= set("|- "):
            continue
        anchor = re.search(r"\(#([\w-]+)\)", cells[4])
        out.append(Row(table, family, cells, anchor.group(1) if anchor else ""))
    return out


def read(path: str = SCOREBOARD) -> list[Row]:
    with open(path) as f:
        return rows(f.read())
