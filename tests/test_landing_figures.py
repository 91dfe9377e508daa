"""The landing page's headline figures are the Scoreboard's: docs/index.md names the Scoreboard tables
to take them from, the build hook (docs_hooks/landing_figures.py) fills them in from
docs/scoreboard.md, and this test reads the page as the hook leaves it. A figure typed into the page
by hand, or a hook that takes the wrong row or cell, fails here. Text only, no build."""
import importlib.util
import os
import re

from helpers import ROOT

from launch.share import scoreboard

INDEX = os.path.join(ROOT, "docs", "index.md")
RATIO = re.compile(r"(?<![\w.])\d+\.\d+x\b")
FIGURE = re.compile(r"(?<![\w.,-])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.])\d+\.\d+(?![\d.x])")


def hook():
    spec = importlib.util.spec_from_file_location("landing_figures", os.path.join(ROOT, "docs_hooks",
                                                                                 "landing_figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def headline_rows(page):
    """(anchor, [ours, Sample Factory, ratio, verdict]) of each row of the page's headline table."""
    out = []
    for line in page.splitlines():
        link = re.match(r"\| \[[^]]*\]\(scoreboard\.md#([\w-]+)\)[^|]*\|(.*)\|\s*$", line)
        if link and "<!--" not in line:
            out.append((link.group(1), [c.strip() for c in link.group(2).split("|")]))
    return out


def problems(page, rows):
    """Every headline figure of the landing page (as the hook leaves it) that is not its Scoreboard
    row's, every ratio on the page and every figure in the headlines' section that no headline row
    gives (a version, "Python 3.11", elsewhere on the page is not a figure)."""
    by_anchor = {r.anchor: r for r in rows}
    found, shown = [], set()
    headlines = headline_rows(page)
    if len(headlines) != 3:
        found.append(f"index.md: {len(headlines)} headline rows, not 3")
    for anchor, cells in headlines:
        row = by_anchor.get(anchor)
        if row is None:
            found.append(f"index.md: #{anchor} is no Scoreboard row")
            continue
        want = [re.sub(r"\s*\(\d+ (?:seeds|pairs)\)", "", c) for c in row.cells[1:3]] + [row.ratio, row.verdict]
        if cells != want:
            found.append(f"index.md: {anchor}: {cells}, the Scoreboard's {want}")
        if min(row.seeds) < 2:
            found.append(f"index.md: {anchor}: {row.seeds} seeds, not a multi-seed row")
        shown |= set(RATIO.findall(" ".join(want))) | set(FIGURE.findall(" ".join(want)))
    for ratio in set(RATIO.findall(page)) - shown:
        found.append(f"index.md: {ratio} is on the page but in no headline row")
    section = next((s for s in re.split(r"^## ", page, flags=re.M) if "](scoreboard.md#" in s), "")
    for figure in set(FIGURE.findall(section.replace("Sample Factory 2.1.1", ""))) - shown:
        found.append(f"index.md: {figure} is on the page but in no headline row")
    return found


def test_the_landing_page_s_figures_are_the_scoreboard_s():
    rows = scoreboard.read()
    page = hook().fill(open(INDEX).read(), rows)
    assert not problems(page, rows), "\n".join(problems(page, rows))


def test_the_headlines_are_the_newest_multi_seed_rows_of_their_tables():
    rows = scoreboard.read()
    for anchor, _ in headline_rows(hook().fill(open(INDEX).read(), rows)):
        row = next(r for r in rows if r.anchor == anchor)
        newer = [r.task for r in rows if r.family == row.family and min(r.seeds) >= 2 and r.date > row.date]
        assert not newer, f"{row.task} ({row.date}) is not the newest multi-seed row of {row.family}: {newer}"


def test_a_figure_typed_into_the_page_or_a_wrong_cell_is_caught():
    rows = scoreboard.read()
    page = hook().fill(open(INDEX).read(), rows)
    typed = page + "\n| doom_basic training speed | 6,692 / 6,324 frames/s | 3,352 / 3,000 | 2.05x |\n"
    assert any("2.05x" in p for p in problems(typed, rows)), problems(typed, rows)
    swapped = re.sub(r"\| 5,494 \| 2,304 \|", "| 2,304 | 5,494 |", page)
    assert swapped != page and any("sb-tp-doom_basic_epyc" in p for p in problems(swapped, rows))
