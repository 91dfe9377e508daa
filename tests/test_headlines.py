"""The headline figures agree with themselves and with every page that states them: a ratio stated
beside figures of its kind about the same thing must come with ours. The throughput figures live
in docs/data/headlines.yaml (the chart is drawn from it); the learning comparisons are the rows of
the Scoreboard's Learning tables (docs/scoreboard.md), read from the page itself. Text only, no
processes."""
import glob
import os
import re

import yaml
from helpers import ROOT

from launch.share import scoreboard

INTEGER = re.compile(r"(?<![\w.,\-/:])\d+(?![\w.,\-:%])")
NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.,])\d+\.\d+(?![\d.])")


def entries():
    with open(os.path.join(ROOT, "docs", "data", "headlines.yaml")) as f:
        return yaml.safe_load(f) + scoreboard_rows(open(os.path.join(ROOT, "docs", "scoreboard.md")).read())


def scoreboard_rows(text):
    """Each row of the Learning tables that has a ratio (launch.share.scoreboard reads them): the task,
    ours and Sample Factory's figures (per seed, or the mean where a cell gives the mean of more), the
    ratio; `about` = the task's name without its family prefix and a mention of Sample Factory."""
    rows = []
    for row in scoreboard.rows(text):
        if row.table != "Learning" or not re.fullmatch(r"\d+\.\d+x", row.ratio):
            continue
        task = re.sub(r"`([^`]*)`.*", r"\1", row.task).split()[0]
        rows.append({"what": row.task, "ours": row.ours, "theirs": row.theirs, "ratio": row.ratio,
                     "about": [f"(?i){re.escape(task.split('_', 1)[-1])}", "Sample Factory|SF"]})
    return rows


def blocks(text):
    """Paragraphs and list items (lines joined), and each table row on its own after its table's header
    (which names the columns: "Sample Factory", the measure); the header's own figures are not the row's."""
    out, current, header = [], [], None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
        if line.lstrip().startswith("|") or not line.strip() or re.match(r"\s*([-*]|\d+\.)\s", line):
            if current:
                out.append(" ".join(current))
            current = []
            if line.lstrip().startswith("|"):
                if header is None:
                    header = re.sub(r"\d", "", line)
                out.append(f"{header} {line}")
                continue
        if line.strip():
            current.append(line.strip())
    if current:
        out.append(" ".join(current))
    return out


def value(token):
    return float(token.replace(",", ""))


def problems(pages, headlines):
    """Lines naming each place a page states a headline ratio with figures that are not ours (every
    seed's figure, or their mean)."""
    found = []
    for h in headlines:
        ratio = float(h["ratio"].rstrip("x"))
        digits = len(h["ratio"].rstrip("x").split(".")[1])
        mean = sum(h["ours"]) / len(h["ours"])
        got = mean / (sum(h["theirs"]) / len(h["theirs"]))
        if round(got, digits) != ratio:
            found.append(f"headlines.yaml: {h['what']}: {h['ratio']} but ours / theirs is {got:.3f}")
        pattern = re.compile(rf"(?<![\d.]){re.escape(h['ratio'])}\b")
        low, high = min(h["ours"]) / 3, 3 * max(h["ours"])  # figures of ours' size, not windows or lrs
        means = {round(mean, d) for d in (0, 1, 2)}  # a page may give the mean over the seeds instead
        theirs = set(map(float, h["theirs"]))
        whole = all(float(v).is_integer() for v in h["ours"])
        for name, text in pages.items():
            for block in blocks(text):
                if not pattern.search(block) or not all(re.search(a, block) for a in h["about"]):
                    continue
                figures = {value(t) for t in NUMBER.findall(block)} - {ratio}
                if whole:  # ours are whole numbers (returns, kills): bare integers count too, not dates or ranges
                    figures |= {value(t) for t in INTEGER.findall(block)}
                figures = {v for v in figures if low <= v <= high}
                if figures and not (set(map(float, h["ours"])) <= figures or (figures - theirs) & means):
                    found.append(f"{name}: {h['ratio']} ({h['what']}) beside {sorted(figures)}, not ours "
                                 f"{h['ours']}: {block[:160]}")
    return found


def pages():
    """Every page but the changelog, which records what each day found, in that day's figures."""
    paths = [*glob.glob(os.path.join(ROOT, "docs", "*.md")), os.path.join(ROOT, "README.md")]
    paths = [p for p in paths if not p.endswith("changelog.md")]
    return {os.path.relpath(p, ROOT): open(p).read() for p in paths}


def test_every_page_states_the_headline_figures_as_the_scoreboard_does():
    assert not problems(pages(), entries()), "\n".join(problems(pages(), entries()))


def test_the_check_catches_a_ratio_beside_another_run_s_figure():
    """README's GPU line as it was until 2026-11-29: the bench's 64,899 with the 60 s runs' 1.64x."""
    old = ("(2026-11-26/27): one node with its learner and inference on the GPU trained doom_basic at 64,899\n"
           "env frames/s, 1.64x Sample Factory 2.1.1 on the same layout, `tests/test_gpu.py`'s single-GPU tests\n")
    found = problems({"README.md": old}, entries())
    assert len(found) == 1 and "64899" in found[0] and "68235" in found[0], found
    assert not problems({"README.md": old.replace("64,899", "68,235")}, entries())


def test_the_learning_rows_are_the_scoreboards_and_a_restated_figure_must_match_them():
    rows = {r["what"]: r for r in scoreboard_rows(open(os.path.join(ROOT, "docs", "scoreboard.md")).read())}
    assert len(rows) >= 12 and rows["`mujoco_ant`"]["ours"] == [605, 802], sorted(rows)
    said = "defend_the_center, seeds 0-5, ours against Sample Factory over 2M-3M: 11.81 against 9.78 (1.21x).\n"
    assert not problems({"x.md": said}, entries())  # the mean of ours' seeds, as environments.md states it
    found = problems({"x.md": said.replace("11.81", "11.91")}, entries())
    assert len(found) == 1 and "defend_the_center" in found[0], found
    table = ("| task | ours, seeds 0 / 1 | Sample Factory, seeds 0 / 1 | ours / Sample Factory (means) |\n"
             "| --- | --- | --- | --- |\n| Humanoid (its own lr, 0.001: below) | 812 / 699 | 881 / 756 | **0.92x** |\n")
    assert not problems({"x.md": table}, entries())  # environments.md's row, under its header
    found = problems({"x.md": table.replace("812", "822")}, entries())
    assert len(found) == 1 and "mujoco_humanoid" in found[0], found
    wrong = [dict(rows["`mujoco_ant`"], ratio="1.10x")]
    assert problems({}, wrong) == ["headlines.yaml: `mujoco_ant`: 1.10x but ours / theirs is 1.028"]
