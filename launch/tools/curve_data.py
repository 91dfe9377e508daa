"""Learning curves read from run directories: one of ours (its tb/ and train.log) or a Sample Factory 2
experiment (its .summary/0 TensorBoard file and sf_log.txt), each a `Curve` of the compared metric
against env frames and seconds since launch; runs grouped by label (seeds of one setting). What
launch.curves tabulates and launch.tools.plots draws."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

WINDOW_STEP = 10_000  # frames between the readings of --mean-from's window
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _last_until(xs: list, values: list[float], x: float) -> float | None:
    """The last value whose x is at or before `x` (xs ascending; None before the first)."""
    last = None
    for xi, v in zip(xs, values):
        if xi > x:
            break
        last = v
    return last


@dataclass
class Curve:
    name: str
    frames: list[int]
    seconds: list[float]  # since launch
    rewards: list[float]
    label: str = ""  # runs that share a label are seeds of one setting (LABEL=RUN_DIR)

    def at(self, frames: int) -> float | None:
        """The last reward logged at or before `frames` (None before the first)."""
        return _last_until(self.frames, self.rewards, frames)

    def mean_between(self, lo: int, hi: int, step: int = WINDOW_STEP) -> float | None:
        """The curve's mean over frames lo..hi, read every `step` frames (None if it has no
        reading there)."""
        values = [v for v in (self.at(f) for f in range(lo, hi + 1, step)) if v is not None]
        return sum(values) / len(values) if values else None

    def at_time(self, seconds: float) -> float | None:
        """The last reward logged at or before `seconds` since launch (None before the first)."""
        return _last_until(self.seconds, self.rewards, seconds)

    def first_reaching(self, threshold: float) -> tuple[int, float] | None:
        for f, s, r in zip(self.frames, self.seconds, self.rewards):
            if r >= threshold:
                return f, s
        return None


def _launch_time(log: Path) -> float:
    with log.open() as fh:
        for line in fh:
            if m := STAMP.search(line):
                return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise SystemExit(f"curves: no timestamp in {log}")


def _scalars(tb_dir: Path, tag: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        raise SystemExit(f"curves: {tb_dir} has no '{tag}' scalars")
    return acc.Scalars(tag)


TAGS = {"reward": ("episode/reward", "reward/reward"),  # --metric: (ours, Sample Factory's)
        "true_objective": ("episode/true_objective", "policy_stats/avg_true_objective"),
        # the policy's entropy in nats, per learner step (not a score: no reward scale applies)
        "entropy": ("train/entropy", "train/entropy")}
SF_WHOLE_EPISODE = "policy_stats/avg_RecordEpisodeStatistics_reward"  # the raw env's score, all lives


def _sf(tb_dir: Path, metric: str, sf_scale: float):
    """Sample Factory's scalars for `metric` and the scale to divide out: for the true objective its
    raw env's whole-episode score where it logs one (not scaled), else its avg_true_objective."""
    if metric == "true_objective":
        try:
            return _scalars(tb_dir, SF_WHOLE_EPISODE), 1.0
        except SystemExit:
            pass
    return _scalars(tb_dir, TAGS[metric][1]), (1.0 if metric == "entropy" else sf_scale)


def _ours(tb_dir: Path, metric: str):
    """Our scalars for `metric`; a run logged before episode/true_objective existed has its reward
    (which is what the true objective is for every env that defines none of its own)."""
    try:
        return _scalars(tb_dir, TAGS[metric][0])
    except SystemExit:
        if metric != "true_objective":
            raise
        return _scalars(tb_dir, TAGS["reward"][0])


def load(run: Path, sf_scale: float, metric: str = "reward", label: str = "") -> Curve:
    if (run / "sf_log.txt").exists():  # Sample Factory 2
        (events, scale), log = _sf(run / ".summary" / "0", metric, sf_scale), run / "sf_log.txt"
    elif (run / "train.log").exists():
        events, log, scale = _ours(run / "tb", metric), run / "train.log", 1.0
    else:
        raise SystemExit(f"curves: {run} is neither a run directory of ours nor a Sample Factory experiment")
    start = _launch_time(log)
    name = run.name if run.name not in ("", ".") else str(run)
    return Curve(f"{label}/{name}" if label else name, [e.step for e in events],
                 [e.wall_time - start for e in events], [e.value / scale for e in events], label or name)


def groups(curves: list[Curve]) -> dict[str, list[Curve]]:
    """The runs by label, in the order given."""
    out: dict[str, list[Curve]] = {}
    for c in curves:
        out.setdefault(c.label, []).append(c)
    return out


def group_marks(members: list[Curve], marks: list[int]) -> dict:
    """Mean, min and max over the seeds of one label at each mark (None where a seed has no reading)."""
    rows = [[c.at(m) for c in members] for m in marks]
    full = [None if None in r else r for r in rows]
    return {"runs": [c.name for c in members],
            "mean_at_marks": [r and sum(r) / len(r) for r in full],
            "min_at_marks": [r and min(r) for r in full], "max_at_marks": [r and max(r) for r in full]}
