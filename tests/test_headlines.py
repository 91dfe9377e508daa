"""The headline figures (docs/data/headlines.yaml) agree with themselves and with every page that
states them: a ratio stated beside figures of its kind about the same thing must come with ours.
Text only, no processes."""
import glob
import os
import re

import yaml
from helpers import ROOT

NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.,])\d+\.\d+(?![\d.])")


def entries():
    with open(os.path.join(ROOT, "docs", "data", "headlines.yaml")) as f:
        return yaml.safe_load(f)


def blocks(text):
    """Paragraphs and list items (lines joined), and each table row on its own."""
    out, current = [], []
    for line in text.splitlines():
        if line.lstrip().startswith("|") or not line.strip() or re.match(r"\s*([-*]|\d+\.)\s", line):
            if current:
                out.append(" ".join(current))
            current = []
            if line.lstrip().startswith("|"):
                out.append(line)
                continue
        if line.strip():
            current.append(line.strip())
    if current:
        out.append(" ".join(current))
    return out


def value(token):
    return float(token.replace(",", ""))


def problems(pages, headlines):
    """Lines naming each place a page states a headline ratio with figures that are not ours."""
    found = []
    for h in headlines:
        ratio = float(h["ratio"].rstrip("x"))
        digits = len(h["ratio"].rstrip("x").split(".")[1])
        got = sum(h["ours"]) / sum(h["theirs"])
        if round(got, digits) != ratio:
            found.append(f"headlines.yaml: {h['what']}: {h['ratio']} but ours / theirs is {got:.3f}")
        pattern = re.compile(rf"(?<![\d.]){re.escape(h['ratio'])}\b")
        kind = (lambda v: v >= 1000) if min(h["ours"]) >= 1000 else (lambda v: v < 1000)
        for name, text in pages.items():
            for block in blocks(text):
                if not pattern.search(block) or not all(re.search(a, block) for a in h["about"]):
                    continue
                figures = {value(t) for t in NUMBER.findall(block)} - {ratio}
                figures = {v for v in figures if kind(v)}
                if figures and not figures & set(map(float, h["ours"])):
                    found.append(f"{name}: {h['ratio']} ({h['what']}) beside {sorted(figures)}, not ours "
                                 f"{h['ours']}: {block[:160]}")
    return found


def pages():
    paths = [*glob.glob(os.path.join(ROOT, "docs", "*.md")), os.path.join(ROOT, "README.md")]
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
