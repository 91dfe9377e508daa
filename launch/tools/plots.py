"""Learning curves as a picture (`python -m launch.curves ... --plot FILE`): the compared metric
against env frames and against seconds since launch, side by side. A run alone is one line; runs
that share a label (seeds of one setting) are thin lines of one colour with their mean drawn thick
and the band between their lowest and highest reading shaded, read on one grid so that seeds that
log at different frames still line up. matplotlib's Agg backend (no display needed); the file type
follows FILE's suffix (.png, .svg, .pdf)."""
from __future__ import annotations

from launch.tools.curve_data import groups

LABELS = {"true_objective": "true objective (last 100 episodes)", "reward": "reward (last 100 episodes)"}
GRID_POINTS = 200  # readings per band: enough for a smooth band, cheap for any run length


def _grid(hi: float) -> list[float]:
    return [hi * i / GRID_POINTS for i in range(1, GRID_POINTS + 1)]


def _band(members, read, hi: float):
    """(x, mean, low, high) over the grid up to `hi`, where every seed has a reading."""
    xs, mean, low, high = [], [], [], []
    for x in _grid(hi):
        values = [read(c, x) for c in members]
        if None in values:
            continue
        xs.append(x)
        mean.append(sum(values) / len(values))
        low.append(min(values))
        high.append(max(values))
    return xs, mean, low, high


def _draw_group(by_frames, by_time, label: str, members: list, colour) -> None:
    if len(members) == 1:
        c = members[0]
        by_frames.plot([f / 1e6 for f in c.frames], c.rewards, label=c.name, color=colour)
        by_time.plot([s / 60 for s in c.seconds], c.rewards, label=c.name, color=colour)
        return
    for c in members:
        by_frames.plot([f / 1e6 for f in c.frames], c.rewards, color=colour, linewidth=0.6, alpha=0.45)
        by_time.plot([s / 60 for s in c.seconds], c.rewards, color=colour, linewidth=0.6, alpha=0.45)
    for ax, read, hi, scale in ((by_frames, lambda c, x: c.at(x), min(c.frames[-1] for c in members), 1e6),
                                (by_time, lambda c, x: c.at_time(x), min(c.seconds[-1] for c in members), 60)):
        xs, mean, low, high = _band(members, read, hi)
        xs = [x / scale for x in xs]
        ax.fill_between(xs, low, high, color=colour, alpha=0.18, linewidth=0)
        ax.plot(xs, mean, color=colour, linewidth=2.0,
                label=f"{label} (mean of {len(members)} seeds)" if ax is by_frames else None)


def plot_curves(curves: list, path: str, metric: str, threshold: float | None = None, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = [(label, members) for label, members in groups(curves).items() if all(c.frames for c in members)]
    for i, (label, members) in enumerate(drawn):
        _draw_group(by_frames, by_time, label, members, colours[i % len(colours)])
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
