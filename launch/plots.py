"""Learning curves as a picture (`python -m launch.curves ... --plot FILE`): the compared metric
against env frames and against seconds since launch, one line per run, side by side. matplotlib's
Agg backend (no display needed); the file type follows FILE's suffix (.png, .svg, .pdf)."""
from __future__ import annotations

LABELS = {"true_objective": "true objective (last 100 episodes)", "reward": "reward (last 100 episodes)"}


def plot_curves(curves: list, path: str, metric: str, threshold: float | None = None, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for c in curves:
        by_frames.plot([f / 1e6 for f in c.frames], c.rewards, label=c.name)
        by_time.plot([s / 60 for s in c.seconds], c.rewards, label=c.name)
    for ax, xlabel in ((by_frames, "env frames (millions)"), (by_time, "minutes since launch")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
        if threshold is not None:
            ax.axhline(threshold, color="grey", linestyle=":", linewidth=1)
    by_frames.legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
