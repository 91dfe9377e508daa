"""The scaling plots of the docs, drawn from docs/data/scaling.yaml (the figures of the pages'
tables, each block naming its runs' date, machine, commit and command):

    python benchmarks/plot_scaling.py docs/img

writes emulated_hosts_vs_model.png (iteration time on emulated hosts, measured against the
model's prediction, per link), frames_to_70_vs_nodes.png (doom_basic's frames to +70 against
the number of nodes, per way of sharing the batch) and efficiency_vs_nodes.png (the model's
efficiency against nodes per link, CPU and GPU nodes, from docs/data/scaling_model.json: the last
line `python -m launch.scaling` printed, with the emulated hosts' measured and predicted beside it).
"""
from __future__ import annotations

import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "docs", "data", "scaling.yaml")
MODEL = os.path.join(HERE, "..", "docs", "data", "scaling_model.json")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def emulated(rows: list[dict], path: str) -> None:
    plt = _plt()
    links = list(dict.fromkeys(r["link"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True, sharey=True)
    for ax, hosts in zip(axes, sorted({r["hosts"] for r in rows})):
        mine = {r["link"]: r for r in rows if r["hosts"] == hosts}
        xs = range(len(links))
        ax.bar([x - 0.2 for x in xs], [mine[k]["measured"] for k in links], width=0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [mine[k]["predicted"] for k in links], width=0.4, label="model")
        for x, k in zip(xs, links):
            if k != "loopback":
                err = mine[k]["predicted"] / mine[k]["measured"] - 1
                ax.text(x, max(mine[k]["measured"], mine[k]["predicted"]) + 0.05, f"{err:+.0%}", ha="center",
                        fontsize=9)
        ax.set_xticks(list(xs), links)
        ax.set_title(f"{hosts} emulated hosts")
        ax.set_xlabel("each host's link")
    axes[0].set_ylim(0, 1.12 * max(max(r["measured"], r["predicted"]) for r in rows))
    axes[0].set_ylabel("seconds per iteration (doom_basic)")
    axes[0].legend()
    fig.suptitle("Iteration time on emulated hosts: measured against the model (model error above the bars)",
                 fontsize=11)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def frames_to_score(rows: list[dict], path: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4), constrained_layout=True)
    settings = {"split": ("split: ", "tab:blue", "o"), "lr": ("lr x", "tab:green", "s"),
                "before": ("(before)", "tab:red", "^")}
    for key, (marker_text, colour, marker) in settings.items():
        picked = [r for r in rows if marker_text in r["setting"] or (key == "split" and r["nodes"] == 1)]
        xs = [r["nodes"] for r in picked for _ in r["frames"]]
        ys = [f / 1e3 for r in picked for f in r["frames"]]
        label = {"split": "the world's batch split (the default since 2026-11-26)",
                 "lr": "each node's whole batch, lr x nodes (algo.lr_scaling=linear)",
                 "before": "each node's whole batch, same lr (before)"}[key]
        ax.scatter(xs, ys, color=colour, marker=marker, label=label, zorder=3)
        means = {n: sum(f for r in picked if r["nodes"] == n for f in r["frames"]) /
                 sum(len(r["frames"]) for r in picked if r["nodes"] == n) for n in sorted(set(xs))}
        ax.plot(list(means), [v / 1e3 for v in means.values()], color=colour, alpha=0.6)
    ax.set_xticks([1, 2, 4])
    ax.set_xlabel("nodes (sharing one 2-core VM: frames compare, seconds do not)")
    ax.set_ylabel("thousand frames to a last-100 mean of +70")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("doom_basic: frames to +70 against nodes (one point a seed)", fontsize=11)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def efficiency(model: dict, rows: list[dict], path: str) -> None:
    """Efficiency = iteration / (iteration + sync), the model's definition (launch.scaling); an
    emulated run's = 1 - its learner's sync / its iteration (the sync measured inside it)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.9), constrained_layout=True, sharey=True)
    src = model["_source"]
    for ax, device in zip(axes, ("cpu", "gpu")):
        mine = [r for r in model["predicted"] if r["device"] == device]
        for link in sorted({r["link_gbps"] for r in mine}):
            pts = sorted((r["nodes"], r["efficiency"], r["node_batch"]) for r in mine if r["link_gbps"] == link)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{link:g} Gb/s")
        batches = ", ".join(f"{n}: {b}" for n, _, b in sorted({(r["nodes"], 0, r["node_batch"]) for r in mine}))
        what = ("CPU nodes, the learner measured at each share" if device == "cpu"
                else f"GPU nodes, {mine[0]['iteration_s'] * 1e3:.0f} ms iteration (measured on an H100)")
        ax.set_title(f"model: {what}\n(nodes: per-node batch {batches})", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks([8, 64, 256], ["8", "64", "256"])
        ax.set_xlabel("nodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="link", title_fontsize=8)
    axes[0].set_ylabel("efficiency = iteration / (iteration + sync)")
    axes[0].set_ylim(0, 1.05)
    ax = axes[2]
    links = [k for k in dict.fromkeys(r["link"] for r in rows)]
    for hosts, marker, colour in ((2, "o", "tab:blue"), (4, "s", "tab:orange")):
        mine = {r["link"]: r for r in rows if r["hosts"] == hosts}
        xs = range(len(links))
        ax.plot(xs, [1 - mine[k]["sync_measured"] / mine[k]["measured"] for k in links], marker=marker,
                linestyle="-", color=colour, label=f"{hosts} hosts, measured")
        ax.plot(xs, [1 - mine[k]["sync_predicted"] / mine[k]["predicted"] for k in links], marker=marker,
                linestyle="--", fillstyle="none", color=colour, label=f"{hosts} hosts, model")
    ax.set_xticks(list(range(len(links))), links)
    ax.set_xlabel("each host's link")
    ax.set_title("emulated hosts (doom_basic, 2 cores shared):\nmeasured against the model", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"Efficiency against nodes (launch.scaling, {src['date']}, {src['commit']}; emulated hosts "
                 "2026-11-26, ff593af)", fontsize=11)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(DATA) as f:
        data = yaml.safe_load(f)
    emulated(data["emulated_iteration"], os.path.join(sys.argv[1], "emulated_hosts_vs_model.png"))
    frames_to_score(data["frames_to_70"], os.path.join(sys.argv[1], "frames_to_70_vs_nodes.png"))
    with open(MODEL) as f:
        model = json.load(f)
    efficiency(model, data["emulated_iteration"], os.path.join(sys.argv[1], "efficiency_vs_nodes.png"))
