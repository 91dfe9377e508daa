"""MkDocs hook (mkdocs.yml `hooks:`): the landing page's headline figures, filled in from the
Scoreboard's rows when the site is built, so that they are written once, on docs/scoreboard.md.

docs/index.md holds a marker naming the tables to take a figure from, e.g.

    <!-- headline figures: Throughput, VizDoom, MuJoCo -->

and each name becomes one row of a table: the newest row of that Scoreboard table (the latest day
in its measured cell; the first one on the page where two share a day) whose cells stand for two
or more seeds, or pairs of runs, on both sides; its ours, Sample Factory, ratio and verdict cells as
the Scoreboard writes them, its task linking to the row's block there. A name with no such row
fails the build. tests/test_landing_figures.py checks the page against the Scoreboard.
"""
from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # this checkout's launch package, not another installed one
    sys.path.insert(0, ROOT)

from launch.share import scoreboard  # noqa: E402 - after this checkout is on the path

MARKER = re.compile(r"<!-- headline figures: ([^>]*?) -->")
HEADER = ["what", "ours", "Sample Factory", "ours / SF", "verdict"]


def newest_multi_seed(rows: list[scoreboard.Row], family: str) -> scoreboard.Row:
    """The newest row of this table with two or more seeds (or pairs) a side."""
    found = [r for r in rows if r.family == family and min(r.seeds) >= 2]
    if not found:
        raise ValueError(f"docs/index.md: no Scoreboard row of {family!r} with two or more seeds a side")
    newest = max(r.date for r in found)
    return next(r for r in found if r.date == newest)


def describe(row: scoreboard.Row) -> str:
    ours, theirs = row.seeds
    runs = "pairs" if row.table == "Throughput" else "seeds"
    count = f"{ours} {runs} a side" if ours == theirs else f"ours {ours} {runs}, Sample Factory's {theirs}"
    kind = "training speed, env frames/s" if row.table == "Throughput" else f"learning at equal frames, {row.family}"
    task = re.sub(r"\s*\(\d+ (?:seeds|pairs)\)", "", row.task)
    return f"[{task}](scoreboard.md#{row.anchor}): {kind}; {count}, {row.date}"


def table(rows: list[scoreboard.Row], families: list[str]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "| --- " * len(HEADER) + "|"]
    for row in (newest_multi_seed(rows, f) for f in families):
        ours, theirs = (re.sub(r"\s*\(\d+ (?:seeds|pairs)\)", "", c) for c in row.cells[1:3])
        lines.append(f"| {describe(row)} | {ours} | {theirs} | {row.ratio} | {row.verdict} |")
    return "\n".join(lines)


def fill(markdown: str, rows: list[scoreboard.Row]) -> str:
    """The page with each marker replaced by its table."""
    return MARKER.sub(lambda m: table(rows, [f.strip() for f in m.group(1).split(",")]), markdown)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "index.md":
        return markdown
    return fill(markdown, scoreboard.read(os.path.join(config["docs_dir"], "scoreboard.md")))
