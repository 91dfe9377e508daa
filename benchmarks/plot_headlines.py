"""The throughput chart of the docs, drawn from docs/data/headlines.yaml (the headline figures, each
taken from its run's output as the Scoreboard cites it): ours against Sample Factory 2.1.1 in env
frames/s on each machine and workload, the ratio over each pair.

    python benchmarks/plot_headlines.py docs/img/throughput_vs_sf.png
"""
from __future__ import annotations

import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "docs", "data", "headlines.yaml")


def throughput_rows(entries: list[dict]) -> list[dict]:
    """The entries whose figures are frames/s (the scores' figures are under 1,000)."""
    return [e for e in entries if min(e["ours"]) >= 1000]


def draw(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(DATA) as f:
        rows = throughput_rows(yaml.safe_load(f))
    labels = [e["chart"] for e in rows]
    ours = [sum(e["ours"]) / len(e["ours"]) for e in rows]
    theirs = [sum(e["theirs"]) / len(e["theirs"]) for e in rows]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.8 * len(rows)), constrained_layout=True)
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], ours, height=0.4, label="ours", color="#1f77b4")
    ax.barh([y - 0.2 for y in ys], theirs, height=0.4, label="Sample Factory 2.1.1", color="#ff7f0e")
    for y, o, t, e in zip(ys, ours, theirs, rows):
        ax.text(o, y + 0.2, f" {o:,.0f}  ({e['ratio']})", va="center", fontsize=9)
        ax.text(t, y - 0.2, f" {t:,.0f}", va="center", fontsize=9)
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("env frames/s (log scale; a row with two runs a side: their mean)")
    ax.set_xlim(min(theirs) / 2, max(ours) * 4)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    ax.set_title("Ours against Sample Factory 2.1.1, same machine and layout", fontsize=11)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    draw(sys.argv[1])
