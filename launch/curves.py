"""Learning curves side by side: reward at equal frames and the wall-clock time to a score.

    python -m launch.curves [LABEL=]RUN_DIR [...] [--threshold 70] [--every 100000]
                            [--sf-reward-scale 0.01] [--mean-from 1000000] [--metric reward]
                            [--plot curves.png] [--title TEXT]

Each RUN_DIR is one of ours (its tb/ and train.log) or a Sample Factory 2 experiment directory
(<train_dir>/<experiment>: its .summary/0 TensorBoard file and sf_log.txt), told apart by what is
in it. The reward is the mean over the last 100 episodes as each trainer logs it: ours
`episode/reward` (the game's score), Sample Factory's `reward/reward` (the game's score times its
env's reward scaling, which --sf-reward-scale divides out: 0.01 for doom_basic, 1.0 for most other
VizDoom scenarios). --metric true_objective (the default) compares the true objective instead,
the unshaped game measure: ours `episode/true_objective` (the reward where the env defines none of
its own, and for runs logged before it existed), Sample Factory's `policy_stats/avg_true_objective`
(its scaled reward where its env sets none: --sf-reward-scale divides that out too; give 1 where
its env reports an objective of its own, e.g. the gathering scenarios) - except where it logs
`policy_stats/avg_RecordEpisodeStatistics_reward` (its Atari and MuJoCo examples wrap the raw env in
gym's RecordEpisodeStatistics): that is the raw env's whole-episode score, unscaled, the game's
score over all lives on Atari, where its true objective is one life's clipped reward (its
EpisodicLifeEnv ends an episode at each lost life: on Breakout about a fifth of the game's score;
on Pong, which has no lives and points of 1, the same). --metric entropy compares the policy's
entropy per learner step instead (both trainers' `train/entropy`, nats, never rescaled). Time counts from the
first line of the run's log (the launch), so start-up is included for both. Prints one table row
per frame mark and a JSON line with the same figures.
--plot FILE draws the curves (against frames and against time since launch; launch.tools.plots).
LABEL=RUN_DIR names a run; runs given one label are seeds of one setting: the table keeps each
run's column, the JSON line adds the label's mean/min/max at each mark ("groups"), and --plot draws
the seeds as thin lines with their mean and a min-max band.
--mean-from F adds each run's mean reward over frames F to the last mark every run reached (the
curve read every WINDOW_STEP frames, so both trainers weigh frames alike whatever their logging
cadence): a 100-episode mean at one mark swings by a couple of kills on defend_the_line, a window
of it far less.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launch.tools.curve_data import TAGS, Curve, group_marks, groups, load

DEFAULT_THRESHOLD = 70.0  # doom_basic's: the score the time-to-score comparisons were made on


def split_label(arg: str) -> tuple[str, Path]:
    """'LABEL=RUN_DIR' -> (LABEL, RUN_DIR); a bare RUN_DIR is its own label (its folder's name)."""
    label, sep, run = arg.partition("=")
    if sep and label and "/" not in label:
        return label, Path(run)
    return "", Path(arg)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m launch.curves", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="[LABEL=]RUN_DIR",
                   help="a run directory; runs given one LABEL are seeds of one setting")
    p.add_argument("--threshold", type=float, default=None,
                   help="the score whose first arrival is timed (70 when not given; drawn in --plot when given)")
    p.add_argument("--every", type=int, default=100_000, help="frame marks of the table")
    p.add_argument("--sf-reward-scale", type=float, default=1.0, help="Sample Factory's reward scaling of the env")
    p.add_argument("--metric", choices=sorted(TAGS), default="true_objective",
                   help="what is compared: the true objective (default), the logged reward, or the "
                        "policy's entropy (train/entropy of both trainers, in nats)")
    p.add_argument("--mean-from", type=int, default=None,
                   help="also print each run's mean reward from these frames to the last common frame")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw the curves into FILE (.png, .svg, .pdf; needs matplotlib)")
    p.add_argument("--title", default="", help="the plot's title")
    return p


def _print_table(curves: list[Curve], marks: list[int]) -> None:
    width = max(12, *(len(c.name) for c in curves))
    print("frames".rjust(10) + "".join(c.name.rjust(width + 2) for c in curves))
    for m in marks:
        cells = [c.at(m) for c in curves]
        print(f"{m:>10,}" + "".join(("-" if v is None else f"{v:.1f}").rjust(width + 2) for v in cells))


def _run_result(c: Curve, a: argparse.Namespace, marks: list[int], last: int) -> tuple[str, dict]:
    """One run's line (when it first reached the threshold, its window mean) and its JSON entry."""
    hit = c.first_reaching(a.threshold)
    if hit:
        said = f"first >= {a.threshold:g} at {hit[0]:,} frames, {hit[1]:.0f} s after launch"
    elif c.frames:
        said = f"never >= {a.threshold:g} (last {c.rewards[-1]:.1f} at {c.frames[-1]:,} frames)"
    else:
        said = "no episodes"
    entry = {"reward_at_marks": [c.at(m) for m in marks], "frames_to_threshold": hit and hit[0],
             "seconds_to_threshold": hit and round(hit[1], 1),
             "last": [c.frames[-1], c.rewards[-1]] if c.frames else None}
    if a.mean_from is not None:
        mean = entry["window_mean"] = c.mean_between(a.mean_from, last)
        said += f"; mean {mean:.2f} over {a.mean_from:,}-{last:,} frames" if mean is not None else ""
    return said, entry


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    a = p.parse_args(argv)
    drawn_threshold = a.threshold
    if a.threshold is None:
        a.threshold = DEFAULT_THRESHOLD
    if a.every <= 0 or a.sf_reward_scale <= 0:
        p.error("--every and --sf-reward-scale must be positive")
    if a.mean_from is not None and a.mean_from < 0:
        p.error("--mean-from must be >= 0")
    if a.plot is not None:
        _check_plot(p, a.plot)
    curves = [load(run, a.sf_reward_scale, a.metric, label) for label, run in map(split_label, a.runs)]
    if len({c.name for c in curves}) < len(curves):
        p.error("two runs have one name: give them labels (LABEL=RUN_DIR) or distinct folders")
    last = min(c.frames[-1] for c in curves if c.frames) if all(c.frames for c in curves) else 0
    marks = list(range(a.every, last + 1, a.every))
    _print_table(curves, marks)
    out = {"threshold": a.threshold, "marks": marks, "runs": {}}
    if a.mean_from is not None:
        if a.mean_from > last:
            p.error(f"--mean-from {a.mean_from:,} is past the last frame every run reached ({last:,})")
        out["window"] = [a.mean_from, last]
    for c in curves:
        said, out["runs"][c.name] = _run_result(c, a, marks, last)
        print(f"{c.name}: {said}")
    _report_groups(curves, marks, out)
    print(json.dumps(out))
    if a.plot is not None:
        from launch.tools.plots import plot_curves
        plot_curves(curves, a.plot, a.metric, drawn_threshold, a.title)
        print(f"plot: {a.plot}")
    return out


def _report_groups(curves: list[Curve], marks: list[int], out: dict) -> None:
    """The labels given to several runs (seeds): their mean at the marks, printed and in out["groups"]."""
    seeded = {label: members for label, members in groups(curves).items() if len(members) > 1}
    if not seeded:
        return
    out["groups"] = {label: group_marks(members, marks) for label, members in seeded.items()}
    for label, g in out["groups"].items():
        cells = ", ".join("-" if v is None else f"{v:.1f}" for v in g["mean_at_marks"])
        print(f"{label}: mean of {len(g['runs'])} seeds at the marks: {cells}")


def _check_plot(p: argparse.ArgumentParser, path: str) -> None:
    """Before any run is read: matplotlib is there, the file type is one it writes, the folder exists."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        p.error("--plot needs matplotlib: pip install matplotlib (or pip install -e .[plot])")
    if Path(path).suffix.lower() not in (".png", ".svg", ".pdf"):
        p.error(f"--plot {path}: the file must end in .png, .svg or .pdf")
    if not Path(path).resolve().parent.is_dir():
        p.error(f"--plot {path}: folder {Path(path).resolve().parent} does not exist")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
